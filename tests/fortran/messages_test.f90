!> The Fortran module's error messages count as Fortran does (ids(2) is the second id),
!> where the library's own messages count from 0 (ids[1]). Run on 2 ranks: one rank
!> passes a bad argument, both must fail (that rank with the message, the other with
!> MDL_ERR_REMOTE), and the loader must work afterwards.
program messages_test
   use mpi
   use mdloader
   use, intrinsic :: iso_fortran_env, only: int8, int64
   implicit none
   type(mdl_loader) :: ld
   integer :: ierr, rank, failures, total_failures, half, inter
   integer(int8) :: data(6) = [1_int8, 2_int8, 3_int8, 4_int8, 5_int8, 6_int8]
   integer(int64) :: n_total, nbytes, out_offsets(3)
   integer(int8) :: out(64), tiny(1)

   call MPI_Init(ierr)
   call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
   failures = 0
   call mdl_init(ld, MPI_COMM_WORLD)

   ! offsets(1) must be 0: rank 1 passes 1.
   call mdl_register_shard(ld, data, merge([1_int64, 2_int64, 6_int64], [0_int64, 2_int64, 6_int64], rank == 1), ierr)
   call expect(ierr, 1, MDL_ERR_INVALID_ARG, 'offsets(1) = 1, must be 0')
   ! Offsets decrease between the second and third entry: sample 2 (1-based).
   call mdl_register_shard(ld, data, merge([0_int64, 4_int64, 3_int64], [0_int64, 2_int64, 6_int64], rank == 0), ierr)
   call expect(ierr, 0, MDL_ERR_INVALID_ARG, 'offsets decrease at sample 2: offsets(2) = 4 > offsets(3) = 3')
   ! Two samples per rank (2 and 4 bytes).
   call mdl_register_shard(ld, data, [0_int64, 2_int64, 6_int64], ierr)
   call expect(ierr, -1, MDL_OK, '')
   call mdl_num_samples(ld, n_total)
   ! A local call: only the calling rank fails.
   call mdl_sample_size(ld, -1_int64, nbytes, ierr)
   call expect(ierr, -1, MDL_ERR_OUT_OF_RANGE, 'id = -1 is out of range')

   ! The second id is past the end on rank 1.
   call mdl_fetch_batch(ld, merge([0_int64, n_total], [0_int64, 1_int64], rank == 1), out, out_offsets, ierr)
   call expect(ierr, 1, MDL_ERR_OUT_OF_RANGE, 'ids(2) = 4 is out of range')
   ! A negative id, first position, on rank 0.
   call mdl_fetch_batch(ld, merge([-1_int64, 1_int64], [0_int64, 1_int64], rank == 0), out, out_offsets, ierr)
   call expect(ierr, 0, MDL_ERR_OUT_OF_RANGE, 'ids(1) = -1 is out of range')
   ! Too small an output buffer on rank 0: 6 bytes needed (ids 0 and 1: 2 + 4).
   if (rank == 0) then
      call mdl_fetch_batch(ld, [0_int64, 1_int64], tiny, out_offsets, ierr)
   else
      call mdl_fetch_batch(ld, [0_int64, 1_int64], out, out_offsets, ierr)
   end if
   call expect(ierr, 0, MDL_ERR_BUFFER_TOO_SMALL, 'needs 6 bytes, size(out) is 1 (out_offsets(size(ids)+1)')

   ! An epoch of rank 1's own batches whose last offset is past its ids (6 > size 4).
   call mdl_epoch_begin_ids(ld, [0_int64, 1_int64, 2_int64, 3_int64], &
                            merge([0_int64, 2_int64, 4_int64, 6_int64], [0_int64, 1_int64, 2_int64, 4_int64], rank == 1), ierr)
   call expect(ierr, 1, MDL_ERR_INVALID_ARG, 'batch_offsets(4) = 6, must be size(ids) = 4')

   ! Still usable: the last sample of the job is rank 1's 4-byte sample 3..6.
   call mdl_fetch_batch(ld, [n_total - 1, 0_int64], out, out_offsets, ierr)
   call expect(ierr, -1, MDL_OK, '')
   if (ierr == MDL_OK) then
      if (any(out(1:out_offsets(3)) /= [3_int8, 4_int8, 5_int8, 6_int8, 1_int8, 2_int8])) then
         print '(a,i0,a)', 'rank ', rank, ': wrong bytes after the errors'
         failures = failures + 1
      end if
   end if
   call mdl_finalize(ld)

   ! An intercommunicator (even and odd ranks) is refused on every rank.
   call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), rank, half, ierr)
   call MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - mod(rank, 2), 79, inter, ierr)
   call mdl_init(ld, inter, ierr)
   call expect(ierr, -1, MDL_ERR_INVALID_ARG, 'intercommunicator')
   call MPI_Comm_free(inter, ierr)
   call MPI_Comm_free(half, ierr)

   call MPI_Allreduce(failures, total_failures, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
   if (rank == 0) print '(a,i0,a)', 'fortran messages: ', total_failures, ' failures'
   call MPI_Finalize(ierr)
   if (total_failures /= 0) error stop 1

contains

   ! The bad rank must get `code` and a message containing `text` (and no C-style "[");
   ! the other rank MDL_ERR_REMOTE. bad_rank = -1: every rank must get `code`.
   subroutine expect(got, bad_rank, code, text)
      integer, intent(in) :: got, bad_rank, code
      character(len=*), intent(in) :: text
      character(len=:), allocatable :: msg
      integer :: want

      want = code
      if (bad_rank >= 0 .and. rank /= bad_rank) want = MDL_ERR_REMOTE
      msg = mdl_last_error()
      if (got /= want) then
         print '(a,i0,a,i0,a,i0,2a)', 'rank ', rank, ': status ', got, ', expected ', want, ': ', msg
         failures = failures + 1
      else if (want == code .and. code /= MDL_OK .and. (index(msg, text) == 0 .or. index(msg, '[') > 0)) then
         print '(a,i0,5a)', 'rank ', rank, ': message "', msg, '", expected it to contain "', text, '"'
         failures = failures + 1
      end if
   end subroutine expect
end program messages_test
