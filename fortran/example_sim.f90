!> MDLoader from Fortran: a toy simulation that produces training samples on every rank,
!> and a training loop that reads shuffled batches of them across ranks.
!>
!> Each rank runs its own little particle simulation for a rank-dependent number of
!> steps and keeps one snapshot per step as a sample: a header (rank, step, number of
!> particles) and the particles' positions, a different number of particles each step,
!> so the samples have different sizes. The snapshots are registered with MDLoader as
!> this rank's shard. Then a few "epochs" draw a global shuffle of all snapshots, give
!> each rank an equal slice of it, and fetch it in batches: most samples come from other
!> ranks. Every fetched snapshot is checked against a recomputation of the simulation.
!> Epochs use the one-sided, the collective and the automatic backend in turn; a last
!> epoch uses the library's built-in sampler (mdl_epoch_begin / mdl_next_batch, with
!> prefetch when MPI provides MPI_THREAD_MULTIPLE). Error cases are checked (a bad id on
!> one rank, a buffer too small), which must fail on every rank together and leave the
!> loader usable.
!>
!> The same source builds with `use mpi` (default) and `use mpi_f08` (-DMDL_USE_MPI_F08,
!> with the preprocessor on: -cpp), which hands the library comm%MPI_VAL:
!>
!>   mpif90 -cpp -I$(pkg-config --variable=fmoddir mdloader) example_sim.f90 -lmdloader_f $(pkg-config --libs mdloader)
!>   mpif90 -cpp -DMDL_USE_MPI_F08 ... (same)
!>   mpirun -n 2 ./example_sim [epochs] [batch]
!>   (Open MPI as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; more
!>   ranks than cores: mpirun --oversubscribe)
!>
!> Prints a summary on rank 0; exit status 0 when every check passed.
program example_sim
#ifdef MDL_USE_MPI_F08
   use mpi_f08
#else
   use mpi
#endif
   use mdloader
   use, intrinsic :: iso_fortran_env, only: int8, int64, real64, output_unit
   implicit none

#ifdef MDL_USE_MPI_F08
   type(MPI_Comm) :: comm
   character(len=*), parameter :: flavour = 'use mpi_f08'
#else
   integer :: comm
   character(len=*), parameter :: flavour = 'use mpi'
#endif
   integer, parameter :: header_words = 3       ! rank, step, n_particles (int64 each)
   type(mdl_loader) :: loader
   integer :: ierr, mpierr, rank, nranks, r, s, k, epoch, nepochs, batch, backend, provided, n
   integer(int64), pointer :: batch_ids(:), batch_offsets(:)
   integer(int8), pointer :: batch_data(:)
   integer(int64) :: sampled, total_sampled
   integer(int64) :: failures, total_failures     ! int64 like the other reductions (one buffer type per call site)
   integer, allocatable :: steps_of(:)
   integer(int64), allocatable :: first_id(:), perm(:), ids(:), offsets(:), out_offsets(:), own_ids(:)
   integer(int8), allocatable :: data(:), sample(:), out(:)
   integer(int64) :: n_total, n_mine, per_rank, pos, nbytes, checked, total_checked, bytes, total_bytes
   real(real64) :: t0, t1
   character(len=32) :: arg
   character(len=:), allocatable :: job_stats
   character(len=12), parameter :: backend_names(0:2) = [character(len=12) :: 'auto', 'onesided', 'collective']
   integer, parameter :: epoch_backends(3) = [MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE, MDL_BACKEND_AUTO]

   call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, mpierr)   ! MULTIPLE: the sampler may prefetch
   comm = MPI_COMM_WORLD
   call MPI_Comm_rank(comm, rank, mpierr)
   call MPI_Comm_size(comm, nranks, mpierr)
   nepochs = 3
   batch = 16
   if (command_argument_count() >= 1) then
      call get_command_argument(1, arg)
      read (arg, *) nepochs
   end if
   if (command_argument_count() >= 2) then
      call get_command_argument(2, arg)
      read (arg, *) batch
   end if
   failures = 0

   ! ---- the simulation: this rank's snapshots become its shard ----
   allocate (steps_of(0:nranks - 1), first_id(0:nranks))
   do r = 0, nranks - 1
      steps_of(r) = num_steps(r)
   end do
   first_id(0) = 0
   do r = 0, nranks - 1
      first_id(r + 1) = first_id(r) + steps_of(r)
   end do
   n_total = first_id(nranks)

   allocate (offsets(steps_of(rank) + 1))
   offsets(1) = 0
   do s = 1, steps_of(rank)
      offsets(s + 1) = offsets(s) + snapshot_bytes(rank, s)
   end do
   allocate (data(offsets(steps_of(rank) + 1)))
   do s = 1, steps_of(rank)
      call snapshot(rank, s, data(offsets(s) + 1:offsets(s + 1)))
   end do

   ! ---- the loader ----
#ifdef MDL_USE_MPI_F08
   call mdl_init(loader, comm%MPI_VAL, ierr)
#else
   call mdl_init(loader, comm, ierr)
#endif
   call check(ierr == MDL_OK, 'mdl_init')
   call mdl_register_shard(loader, data, offsets, ierr)
   call check(ierr == MDL_OK, 'mdl_register_shard')
   deallocate (data)      ! the library keeps its own copy
   call mdl_num_samples(loader, n_mine, ierr)
   call check(ierr == MDL_OK .and. n_mine == n_total, 'mdl_num_samples')
   call mdl_sample_size(loader, n_total - 1, nbytes, ierr)
   call check(ierr == MDL_OK .and. nbytes == snapshot_bytes(nranks - 1, steps_of(nranks - 1)), 'mdl_sample_size')

   ! ---- "training": epochs of globally shuffled batches ----
   per_rank = n_total / nranks      ! every rank the same number of samples (drop the rest)
   allocate (perm(n_total))
   checked = 0
   bytes = 0
   t0 = MPI_Wtime()
   do epoch = 1, nepochs
      backend = epoch_backends(mod(epoch - 1, 3) + 1)
      call mdl_set_backend(loader, backend, ierr)
      call check(ierr == MDL_OK, 'mdl_set_backend')
      call shuffle(perm, 1234_int64 + epoch)               ! the same permutation on every rank
      do pos = rank * per_rank + 1, (rank + 1) * per_rank, batch
         ids = perm(pos:min(pos + batch - 1, (rank + 1) * per_rank))
         if (mod(pos / batch, 2_int64) == 0) then
            call mdl_fetch_batch_alloc(loader, ids, out, out_offsets, ierr)
         else
            ! A preallocated buffer: large enough for any batch of this dataset.
            if (allocated(out)) deallocate (out)
            if (allocated(out_offsets)) deallocate (out_offsets)
            allocate (out(batch * snapshot_bytes_max()), out_offsets(size(ids) + 1))
            call mdl_fetch_batch(loader, ids, out, out_offsets, ierr)
         end if
         call check(ierr == MDL_OK, 'mdl_fetch_batch (' // trim(backend_names(backend)) // ')')
         if (ierr /= MDL_OK) exit
         do k = 1, size(ids)
            call verify(ids(k), out(out_offsets(k) + 1:out_offsets(k + 1)))
         end do
         checked = checked + size(ids)
         bytes = bytes + out_offsets(size(ids) + 1)
      end do
   end do
   t1 = MPI_Wtime()

   ! ---- one more epoch through the library's built-in sampler ----
   if (provided == MPI_THREAD_MULTIPLE) call mdl_set_prefetch(loader, 2, ierr)
   call mdl_epoch_begin(loader, 7_int64, 0_int64, int(batch, int64), .true., .false., ierr)
   call check(ierr == MDL_OK, 'mdl_epoch_begin')
   sampled = 0
   do while (ierr == MDL_OK)
      call mdl_next_batch(loader, batch_ids, batch_data, batch_offsets, n, ierr)
      call check(ierr == MDL_OK, 'mdl_next_batch')
      if (ierr /= MDL_OK .or. n == 0) exit          ! n = 0 on every rank at once: the end
      do k = 1, n
         call verify(batch_ids(k), batch_data(batch_offsets(k) + 1:batch_offsets(k + 1)))
      end do
      sampled = sampled + n
   end do
   ! DistributedSampler's split: every rank ceil(N/P) samples.
   call check(sampled == (n_total + nranks - 1) / nranks, 'sampler epoch: ceil(N/P) samples on every rank')

   ! ---- an epoch of this rank's own order (any sampler), run as the built-in one's ----
   ! 3 batches of `batch` ids, rank-dependent, the same number of steps on every rank.
   allocate (own_ids(3 * batch))
   own_ids = [(mod(int(k, int64) * 7_int64 + int(rank, int64) * 13_int64, n_total), k = 1, 3 * batch)]
   call mdl_epoch_begin_ids(loader, own_ids, [0_int64, int(batch, int64), int(2 * batch, int64), &
                                              int(3 * batch, int64)], ierr)
   call check(ierr == MDL_OK, 'mdl_epoch_begin_ids')
   sampled = 0
   do while (ierr == MDL_OK)
      call mdl_next_batch(loader, batch_ids, batch_data, batch_offsets, n, ierr)
      call check(ierr == MDL_OK, 'mdl_next_batch (own order)')
      if (ierr /= MDL_OK .or. n == 0) exit
      call check(all(batch_ids == own_ids(sampled + 1:sampled + n)), 'own order: the ids given, in order')
      do k = 1, n
         call verify(batch_ids(k), batch_data(batch_offsets(k) + 1:batch_offsets(k + 1)))
      end do
      sampled = sampled + n
   end do
   call check(sampled == 3 * batch, 'own order: every id given, once')
   deallocate (own_ids)
   call mdl_set_prefetch(loader, 0, ierr)

   ! ---- errors fail on every rank together, and the loader stays usable ----
   if (allocated(out)) deallocate (out)
   if (allocated(out_offsets)) deallocate (out_offsets)
   allocate (out_offsets(2))
   allocate (out(snapshot_bytes_max()))
   ids = [int(rank, int64)]
   if (rank == 0) ids = [n_total]            ! one past the last id, on rank 0 only
   call mdl_fetch_batch(loader, ids, out, out_offsets, ierr)
   if (rank == 0) then
      call check(ierr == MDL_ERR_OUT_OF_RANGE, 'bad id: rank 0 gets MDL_ERR_OUT_OF_RANGE')
      call check(index(mdl_last_error(), 'out of range') > 0, 'bad id: mdl_last_error says why')
   else
      call check(ierr == MDL_ERR_REMOTE, 'bad id: other ranks get MDL_ERR_REMOTE')
   end if
   ids = [int(rank, int64)]                  ! snapshots are > 1 byte: out is too small
   call mdl_fetch_batch(loader, ids, out(1:1), out_offsets, ierr)
   call check(ierr == MDL_ERR_BUFFER_TOO_SMALL .and. out_offsets(2) == snapshot_bytes(0, rank + 1), &
              'small buffer: MDL_ERR_BUFFER_TOO_SMALL and the size needed')
   call mdl_fetch_batch(loader, ids, out, out_offsets(1:1), ierr)
   call check(ierr == MDL_ERR_INVALID_ARG, 'out_offsets too short: MDL_ERR_INVALID_ARG')
   call check(index(mdl_last_error(), 'out_offsets') > 0, 'out_offsets too short: message')
   call mdl_fetch_batch_alloc(loader, ids, out, out_offsets, ierr)
   call check(ierr == MDL_OK, 'usable after errors')
   if (ierr == MDL_OK) call verify(ids(1), out(out_offsets(1) + 1:out_offsets(2)))
   call check(mdl_status_string(MDL_ERR_REMOTE) /= '', 'mdl_status_string')
   call check(index(mdl_stats_json(loader), '"samples"') > 0, 'mdl_stats_json')
   call mdl_stats_json_job(loader, job_stats, ierr)
   call check(ierr == MDL_OK .and. index(job_stats, '"bytes_remote"') > 0, 'mdl_stats_json_job')

   call mdl_finalize(loader, ierr)
   call check(ierr == MDL_OK .and. .not. mdl_initialized(loader), 'mdl_finalize')

   call MPI_Allreduce(failures, total_failures, 1, MPI_INTEGER8, MPI_SUM, comm, mpierr)
   call MPI_Allreduce(checked, total_checked, 1, MPI_INTEGER8, MPI_SUM, comm, mpierr)
   call MPI_Allreduce(bytes, total_bytes, 1, MPI_INTEGER8, MPI_SUM, comm, mpierr)
   call MPI_Allreduce(sampled, total_sampled, 1, MPI_INTEGER8, MPI_SUM, comm, mpierr)
   if (rank == 0) then
      write (output_unit, '(a,a,a,i0,a,i0,a,i0,a)') 'example_sim (', flavour, '): ', nranks, ' ranks, ', &
         n_total, ' snapshots, ', nepochs, ' epochs'
      write (output_unit, '(a,i0,a,i0,a,f8.3,a,f12.0,a)') '  verified ', total_checked, ' fetched snapshots (', &
         total_bytes, ' bytes) in ', t1 - t0, ' s, ', real(total_checked, real64) / max(t1 - t0, 1e-9_real64), &
         ' samples/s'
      write (output_unit, '(a,i0,a,a)') '  built-in sampler epoch: verified ', total_sampled, ' snapshots', &
         merge(' (prefetch 2)', '             ', provided == MPI_THREAD_MULTIPLE)
      if (total_failures == 0) then
         write (output_unit, '(a)') '  all checks passed'
      else
         write (output_unit, '(a,i0,a)') '  ', total_failures, ' checks FAILED'
      end if
   end if
   call MPI_Finalize(mpierr)
   if (total_failures /= 0) error stop 1

contains

   !> Number of simulation steps (= snapshots) on rank r: different on every rank.
   integer function num_steps(r)
      integer, intent(in) :: r
      num_steps = 37 + 11 * r
   end function num_steps

   !> Number of particles in rank r's snapshot of step s (1-based): 3 .. 40.
   integer function num_particles(r, s)
      integer, intent(in) :: r, s
      num_particles = 3 + mod(7 * s + 5 * r, 38)
   end function num_particles

   integer(int64) function snapshot_bytes(r, s)
      integer, intent(in) :: r, s
      snapshot_bytes = 8_int64 * (header_words + 3 * num_particles(r, s))
   end function snapshot_bytes

   integer(int64) function snapshot_bytes_max()
      snapshot_bytes_max = 8_int64 * (header_words + 3 * 40)
   end function snapshot_bytes_max

   !> The positions of rank r's particles at step s: a deterministic toy trajectory.
   subroutine positions(r, s, x)
      integer, intent(in) :: r, s
      real(real64), intent(out) :: x(:, :)
      integer :: i
      do i = 1, size(x, 2)
         x(1, i) = cos(0.05_real64 * s + i) * (1 + r)
         x(2, i) = sin(0.05_real64 * s + 2 * i) * (1 + r)
         x(3, i) = 0.01_real64 * s * i
      end do
   end subroutine positions

   !> Serialises rank r's snapshot of step s into bytes.
   subroutine snapshot(r, s, bytes_out)
      integer, intent(in) :: r, s
      integer(int8), intent(out) :: bytes_out(:)
      integer(int64) :: header(header_words)
      real(real64), allocatable :: x(:, :)
      integer :: np
      np = num_particles(r, s)
      allocate (x(3, np))
      call positions(r, s, x)
      header = [int(r, int64), int(s, int64), int(np, int64)]
      bytes_out(1:8 * header_words) = transfer(header, bytes_out, 8 * header_words)
      bytes_out(8 * header_words + 1:) = transfer(x, bytes_out, 24 * np)
   end subroutine snapshot

   !> Checks that `got` is the snapshot with 0-based global id `id`.
   subroutine verify(id, got)
      integer(int64), intent(in) :: id
      integer(int8), intent(in) :: got(:)
      integer :: owner, step
      owner = 0
      do while (id >= first_id(owner + 1))
         owner = owner + 1
      end do
      step = int(id - first_id(owner)) + 1       ! ids are 0-based, steps 1-based
      if (allocated(sample)) deallocate (sample)
      allocate (sample(snapshot_bytes(owner, step)))
      call snapshot(owner, step, sample)
      if (size(got) /= size(sample)) then
         call check(.false., 'snapshot size')
      else if (any(got /= sample)) then
         call check(.false., 'snapshot content')
      end if
   end subroutine verify

   !> Fisher-Yates shuffle of 0 .. size(p)-1 with the Park-Miller generator (no integer
   !> overflow): identical on every rank.
   subroutine shuffle(p, seed)
      integer(int64), intent(out) :: p(:)
      integer(int64), intent(in) :: seed
      integer(int64) :: i, j, t, state
      do i = 1, size(p, kind=int64)
         p(i) = i - 1
      end do
      state = 1 + modulo(seed, 2147483646_int64)
      do i = size(p, kind=int64), 2, -1
         state = modulo(state * 48271_int64, 2147483647_int64)
         j = 1 + modulo(state, i)
         t = p(i)
         p(i) = p(j)
         p(j) = t
      end do
   end subroutine shuffle

   subroutine check(ok, what)
      logical, intent(in) :: ok
      character(len=*), intent(in) :: what
      if (.not. ok) then
         failures = failures + 1
         write (output_unit, '(a,i0,a,a,a,i0,a,a)') 'rank ', rank, ': FAILED ', what, ' (ierr ', ierr, '): ', &
            mdl_last_error()
      end if
   end subroutine check

end program example_sim
