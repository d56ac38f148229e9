!> Replica groups from Fortran: groups of group_size (the first argument; 0 = one per
!> node) register their parts of one dataset whose bytes name the group that holds
!> them, and every fetch must return the rank's own group's bytes. A group size that
!> does not divide the job must fail on every rank. Prints "replica_test: ok" at the end.
program replica_test
   use mpi
   use mdloader
   use, intrinsic :: iso_fortran_env, only: int8, int64
   implicit none
   integer(int64), parameter :: num_samples = 37
   type(mdl_loader) :: ld, bad
   integer :: ierr, rank, nranks, group_size, group, num_groups, rank_in_group, members
   integer :: failures, total_failures
   integer(int64) :: first, count, i, id, n_total
   integer(int64), allocatable :: offsets(:), ids(:), out_offsets(:)
   integer(int8), allocatable :: data(:), out(:)
   character(len=16) :: arg

   call MPI_Init(ierr)
   call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
   call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
   call get_command_argument(1, arg)
   read (arg, *) group_size
   failures = 0

   ! A group size that cannot split the job (nranks + 1 never divides nranks > 0).
   call mdl_init_replicated(bad, MPI_COMM_WORLD, nranks + 1, ierr)
   if (ierr /= MDL_ERR_INVALID_ARG) call fail('a non-dividing group size was accepted')

   call mdl_init_replicated(ld, MPI_COMM_WORLD, group_size)
   call mdl_replica_info(ld, group, num_groups, rank_in_group, members)
   if (group_size > 0) then
      if (members /= group_size .or. group /= rank / group_size .or. rank_in_group /= mod(rank, group_size) &
          .or. num_groups /= nranks / group_size) call fail('mdl_replica_info disagrees with the consecutive split')
   end if

   ! This rank's part: sample id has length 1 + mod(id, 5), every byte id * 3 + group.
   call mdl_replica_part(ld, num_samples, first, count)
   allocate (offsets(count + 1))
   offsets(1) = 0
   do i = 1, count
      offsets(i + 1) = offsets(i) + sample_length(first + i - 1)
   end do
   allocate (data(max(offsets(count + 1), 1_int64)))
   do i = 1, count
      data(offsets(i) + 1:offsets(i + 1)) = marker(first + i - 1, group)
   end do
   call mdl_register_shard(ld, data, offsets)
   call mdl_num_samples(ld, n_total)
   if (n_total /= num_samples) call fail('mdl_num_samples is not the group''s dataset')

   ! Every sample, in reverse, from this rank's group.
   allocate (ids(num_samples), out_offsets(num_samples + 1), out(num_samples * 5))
   ids = [(num_samples - i, i = 1, num_samples)]
   call mdl_fetch_batch(ld, ids, out, out_offsets)
   do i = 1, num_samples
      id = ids(i)
      if (out_offsets(i + 1) - out_offsets(i) /= sample_length(id)) then
         call fail('a sample has the wrong length')
      else if (any(out(out_offsets(i) + 1:out_offsets(i + 1)) /= marker(id, group))) then
         call fail('a sample came from another group')
      end if
   end do
   call mdl_finalize(ld)

   call MPI_Allreduce(failures, total_failures, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
   if (rank == 0 .and. total_failures == 0) print '(a)', 'replica_test: ok'
   call MPI_Finalize(ierr)
   if (total_failures /= 0) error stop 1

contains

   integer(int64) function sample_length(sample_id)
      integer(int64), intent(in) :: sample_id
      sample_length = 1 + mod(sample_id, 5_int64)
   end function sample_length

   integer(int8) function marker(sample_id, holder)
      integer(int64), intent(in) :: sample_id
      integer, intent(in) :: holder
      marker = int(mod(sample_id * 3 + holder, 127_int64), int8)
   end function marker

   subroutine fail(what)
      character(len=*), intent(in) :: what
      print '(a,i0,a,a)', 'rank ', rank, ': ', what
      failures = failures + 1
   end subroutine fail
end program replica_test
