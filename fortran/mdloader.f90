!> MDLoader for Fortran: module mdloader, over iso_c_binding and the C API of
!> libmdloader.so (include/mdloader.h is the reference for every call's semantics).
!>
!> Conventions
!>  - The communicator is an integer handle: `comm` with `use mpi` (or mpif.h) and
!>    `comm%MPI_VAL` with `use mpi_f08`. The library duplicates it; MPI must already be
!>    initialised, and the library never initialises or finalises MPI. This module does
!>    not use MPI itself, so it works with either MPI module and needs no MPI to compile.
!>  - Every routine has an optional last argument `ierr` (integer, intent(out)) that
!>    receives a status code: MDL_OK (0) on success, else one of the MDL_ERR_* values
!>    below. When `ierr` is absent and the call fails, the message is written to
!>    error_unit and the program stops with `error stop` (like MPI's default
!>    MPI_ERRORS_ARE_FATAL); pass `ierr` to handle errors yourself.
!>    mdl_last_error() returns the message of the last failed call.
!>  - Global sample ids are 0-BASED integer(int64) values: rank r's local sample i
!>    (1-based position in its shard) has id  (sum of samples on ranks < r) + i - 1.
!>  - A shard is a byte array `data` (integer(int8)) and `offsets` (integer(int64)) with
!>    n + 1 entries, offsets(1) == 0, non-decreasing: local sample i (1-based) is
!>    data(offsets(i)+1 : offsets(i+1)). The data is copied by the library.
!>  - A fetched batch of n ids fills `out` and `out_offsets` (n + 1 entries) the same
!>    way: the sample ids(k) is out(out_offsets(k)+1 : out_offsets(k+1)), k = 1..n.
!>  - Routines marked "Collective" must be called by every rank of the loader's
!>    communicator, in the same order. A bad argument on one rank makes every rank
!>    return an error (that rank its own code, the others MDL_ERR_REMOTE), never a hang;
!>    the argument checks this module adds keep that property.
!>  - Arrays may be non-contiguous sections (the compiler passes a contiguous copy).
!>  - Messages name array elements as Fortran counts them: ids(2) is the second id.
!>
!> Calls ([, ierr] is the optional status; kinds: int8, int64 from iso_fortran_env):
!>   Collective (every rank, same order):
!>   mdl_init(loader, comm [, ierr])                       integer :: comm
!>   mdl_init_replicated(loader, comm, group_size [, ierr]) integer :: comm, group_size
!>        replica groups of group_size consecutive ranks (0: one per node), each
!>        holding a full copy of the dataset; see mdl_init_replicated below
!>   mdl_register_shard(loader, data, offsets [, ierr])    integer(int8) :: data(:); integer(int64) :: offsets(n+1)
!>   mdl_fetch_batch(loader, ids, out, out_offsets [, ierr])
!>        integer(int64) :: ids(n); integer(int8) :: out(:); integer(int64) :: out_offsets(n+1)
!>   mdl_fetch_batch_alloc(loader, ids, out, out_offsets [, ierr])
!>        the same with integer(int8), allocatable :: out(:); integer(int64), allocatable :: out_offsets(:)
!>   mdl_epoch_begin(loader, seed, epoch, batch_size, shuffle, drop_last [, ierr])
!>        integer(int64) :: seed, epoch, batch_size; logical :: shuffle, drop_last
!>   mdl_epoch_begin_ids(loader, ids, batch_offsets [, ierr])
!>        integer(int64) :: ids(:), batch_offsets(steps+1): an epoch of this rank's own batches
!>   mdl_next_batch(loader, ids, data, offsets, n [, ierr])
!>        integer(int64), pointer :: ids(:), offsets(:); integer(int8), pointer :: data(:); integer :: n
!>   mdl_epoch_seek(loader, step [, ierr])                 integer(int64) :: step (0-based)
!>   mdl_finalize(loader [, ierr])
!>   mdl_stats_json_job(loader, json [, ierr])             character(:), allocatable, intent(out) :: json
!>                                                         (the job's statistics, the same on every rank)
!>   Local:
!>   mdl_num_samples(loader, n [, ierr])                   integer(int64), intent(out) :: n
!>   mdl_sample_size(loader, id, nbytes [, ierr])          integer(int64) :: id; integer(int64), intent(out) :: nbytes
!>   mdl_set_backend(loader, backend [, ierr])             integer :: backend (MDL_BACKEND_*)
!>   mdl_before_mpi_finalize()   stops the library's progress threads calling MPI; call it
!>        right before MPI_Finalize where a loader may still be open (see the C header)
!>   mdl_set_prefetch(loader, depth [, ierr])              integer :: depth (0 .. MDL_MAX_PREFETCH)
!>   mdl_replica_info(loader, group, num_groups, rank_in_group, group_size [, ierr])
!>        integer, intent(out) (group and rank_in_group 0-based, as MPI ranks)
!>   mdl_replica_part(loader, num_samples, first, count [, ierr])
!>        integer(int64): this rank's part of its group's copy, ids first .. first+count-1
!>   Functions:
!>   mdl_stats_json(loader)      character(:), allocatable: this rank's statistics (JSON)
!>   mdl_last_error()            character(:), allocatable: why the last call failed
!>   mdl_status_string(status)   character(:), allocatable: the name of a status code
!>   mdl_initialized(loader)     logical: between mdl_init and mdl_finalize
!>   mdl_c_handle(loader)        type(c_ptr): the C handle (mdl_loader *), for C code of your own
!>
!> Example (see fortran/example_sim.f90 for a complete program):
!>
!>   use mdloader
!>   type(mdl_loader) :: ld
!>   integer(int8), allocatable :: buf(:)
!>   integer(int64), allocatable :: offs(:)
!>   call mdl_init(ld, MPI_COMM_WORLD, ierr)              ! comm%MPI_VAL with mpi_f08
!>   call mdl_register_shard(ld, data, offsets, ierr)
!>   call mdl_fetch_batch_alloc(ld, [0_int64, 5_int64], buf, offs, ierr)
!>   if (ierr /= MDL_OK) print *, mdl_last_error()
!>   call mdl_finalize(ld, ierr)
module mdloader
   use, intrinsic :: iso_c_binding, only: c_int, c_int32_t, c_int64_t, c_size_t, c_char, c_ptr, c_null_ptr, &
                                          c_null_char, c_associated, c_loc, c_f_pointer
   use, intrinsic :: iso_fortran_env, only: int8, int64, error_unit
   implicit none
   private

   !> Version of the C API this module was written against (include/mdloader.h).
   integer, parameter, public :: MDL_VERSION_MAJOR = 0
   integer, parameter, public :: MDL_VERSION_MINOR = 1
   integer, parameter, public :: MDL_VERSION_PATCH = 0

   !> Status codes (the values of enum mdl_status; part of the ABI).
   integer, parameter, public :: MDL_OK = 0                    !< success
   integer, parameter, public :: MDL_ERR_NULL_ARG = 1          !< a required argument was missing
   integer, parameter, public :: MDL_ERR_INVALID_ARG = 2       !< malformed offsets, bad backend value, ...
   integer, parameter, public :: MDL_ERR_OUT_OF_RANGE = 3      !< a sample id >= num_samples (or < 0)
   integer, parameter, public :: MDL_ERR_BUFFER_TOO_SMALL = 4  !< out too small; out_offsets(n+1) = bytes needed
   integer, parameter, public :: MDL_ERR_STATE = 5             !< call out of order (fetch before register, ...)
   integer, parameter, public :: MDL_ERR_MPI = 6               !< MPI returned an error
   integer, parameter, public :: MDL_ERR_NO_MEMORY = 7         !< an allocation failed
   integer, parameter, public :: MDL_ERR_PANIC = 8             !< an internal bug was caught at the boundary
   integer, parameter, public :: MDL_ERR_REMOTE = 9            !< another rank failed this collective call
   integer, parameter, public :: MDL_ERR_TIMEOUT = 10          !< a collective waited longer than MDL_TIMEOUT
   integer, parameter, public :: MDL_ERR_CALL_MISMATCH = 11    !< the ranks made different collective calls

   !> The deepest prefetch mdl_set_prefetch accepts.
   integer, parameter, public :: MDL_MAX_PREFETCH = 64

   !> Backends (enum mdl_backend).
   integer, parameter, public :: MDL_BACKEND_AUTO = 0          !< the estimator decides, per step (default)
   integer, parameter, public :: MDL_BACKEND_ONESIDED = 1      !< MPI RMA gets from the owners' windows
   integer, parameter, public :: MDL_BACKEND_COLLECTIVE = 2    !< MPI_Alltoallv of requests and data

   !> A loader: wraps the C handle (mdl_loader *). Default-initialised to "no loader".
   !> Do not copy a live loader and finalize both copies.
   type, public :: mdl_loader
      private
      type(c_ptr) :: handle = c_null_ptr
   end type mdl_loader

   public :: mdl_init, mdl_init_replicated, mdl_replica_info, mdl_replica_part, mdl_register_shard, mdl_num_samples, mdl_sample_size
   public :: mdl_fetch_batch, mdl_fetch_batch_alloc, mdl_set_backend, mdl_finalize
   public :: mdl_last_error, mdl_status_string, mdl_initialized, mdl_c_handle, mdl_stats_json
   public :: mdl_stats_json_job, mdl_before_mpi_finalize
   public :: mdl_epoch_begin, mdl_epoch_begin_ids, mdl_next_batch, mdl_epoch_seek, mdl_set_prefetch, mdl_epoch_ids

   !> What mdl_next_batch points at when there is no batch (size 0, never written).
   integer(int64), target, save :: no_ids(0), no_offsets(0)
   integer(int8), target, save :: no_data(0)

   !> Message of the last call that this module itself rejected (empty: none pending).
   !> Takes precedence over the library's message until a later call fails in the library.
   character(len=:), allocatable, save :: module_error

   interface
      function c_mdl_init_f(comm, out) result(status) bind(C, name='mdl_init_f')
         import :: c_int, c_ptr
         integer(c_int), value :: comm
         type(c_ptr), value :: out      ! mdl_loader **
         integer(c_int) :: status
      end function c_mdl_init_f

      function c_mdl_init_replicated_f(comm, group_size, out) result(status) bind(C, name='mdl_init_replicated_f')
         import :: c_int, c_ptr
         integer(c_int), value :: comm, group_size
         type(c_ptr), value :: out      ! mdl_loader **
         integer(c_int) :: status
      end function c_mdl_init_replicated_f

      function c_mdl_replica_info(h, group, num_groups, rank_in_group, group_size) result(status) &
         bind(C, name='mdl_replica_info')
         import :: c_int, c_int32_t, c_ptr
         type(c_ptr), value :: h
         integer(c_int32_t), intent(out) :: group, num_groups, rank_in_group, group_size
         integer(c_int) :: status
      end function c_mdl_replica_info

      function c_mdl_replica_part(h, num_samples, first, count) result(status) bind(C, name='mdl_replica_part')
         import :: c_int, c_int64_t, c_ptr
         type(c_ptr), value :: h
         integer(c_int64_t), value :: num_samples
         integer(c_int64_t), intent(out) :: first, count
         integer(c_int) :: status
      end function c_mdl_replica_part

      function c_mdl_register_shard(h, data, offsets, n_samples) result(status) &
         bind(C, name='mdl_register_shard')
         import :: c_int, c_int64_t, c_ptr
         type(c_ptr), value :: h, data, offsets
         integer(c_int64_t), value :: n_samples
         integer(c_int) :: status
      end function c_mdl_register_shard

      function c_mdl_num_samples(h, out) result(status) bind(C, name='mdl_num_samples')
         import :: c_int, c_int64_t, c_ptr
         type(c_ptr), value :: h
         integer(c_int64_t), intent(out) :: out
         integer(c_int) :: status
      end function c_mdl_num_samples

      function c_mdl_sample_size(h, id, out) result(status) bind(C, name='mdl_sample_size')
         import :: c_int, c_int64_t, c_ptr
         type(c_ptr), value :: h
         integer(c_int64_t), value :: id
         integer(c_int64_t), intent(out) :: out
         integer(c_int) :: status
      end function c_mdl_sample_size

      function c_mdl_fetch_batch(h, ids, n, out, out_cap, out_offsets) result(status) &
         bind(C, name='mdl_fetch_batch')
         import :: c_int, c_int64_t, c_size_t, c_ptr
         type(c_ptr), value :: h, ids
         integer(c_size_t), value :: n
         type(c_ptr), value :: out
         integer(c_int64_t), value :: out_cap
         type(c_ptr), value :: out_offsets
         integer(c_int) :: status
      end function c_mdl_fetch_batch

      function c_mdl_set_backend(h, b) result(status) bind(C, name='mdl_set_backend')
         import :: c_int, c_ptr
         type(c_ptr), value :: h
         integer(c_int), value :: b
         integer(c_int) :: status
      end function c_mdl_set_backend

      function c_mdl_epoch_begin(h, seed, epoch, batch_size, shuffle, drop_last) result(status) &
         bind(C, name='mdl_epoch_begin')
         import :: c_int, c_int64_t, c_ptr
         type(c_ptr), value :: h
         integer(c_int64_t), value :: seed, epoch, batch_size
         integer(c_int), value :: shuffle, drop_last
         integer(c_int) :: status
      end function c_mdl_epoch_begin

      function c_mdl_epoch_begin_ids(h, ids, batch_offsets, steps) result(status) bind(C, name='mdl_epoch_begin_ids')
         import :: c_int, c_int64_t, c_ptr
         type(c_ptr), value :: h, ids, batch_offsets
         integer(c_int64_t), value :: steps
         integer(c_int) :: status
      end function c_mdl_epoch_begin_ids

      function c_mdl_next_batch(h, ids, data, offsets, n) result(status) bind(C, name='mdl_next_batch')
         import :: c_int, c_size_t, c_ptr
         type(c_ptr), value :: h
         type(c_ptr), intent(out) :: ids, data, offsets
         integer(c_size_t), intent(out) :: n
         integer(c_int) :: status
      end function c_mdl_next_batch

      function c_mdl_epoch_seek(h, step) result(status) bind(C, name='mdl_epoch_seek')
         import :: c_int, c_int64_t, c_ptr
         type(c_ptr), value :: h
         integer(c_int64_t), value :: step
         integer(c_int) :: status
      end function c_mdl_epoch_seek

      function c_mdl_set_prefetch(h, depth) result(status) bind(C, name='mdl_set_prefetch')
         import :: c_int, c_int32_t, c_ptr
         type(c_ptr), value :: h
         integer(c_int32_t), value :: depth
         integer(c_int) :: status
      end function c_mdl_set_prefetch

      function c_mdl_epoch_ids(n_samples, n_ranks, rank, seed, epoch, batch_size, shuffle, drop_last, step, &
                               out, cap, n) result(status) bind(C, name='mdl_epoch_ids')
         import :: c_int, c_int64_t, c_size_t
         integer(c_int64_t), value :: n_samples, n_ranks, rank, seed, epoch, batch_size, step
         integer(c_int), value :: shuffle, drop_last
         integer(c_int64_t), intent(out) :: out(*)
         integer(c_size_t), value :: cap
         integer(c_size_t), intent(out) :: n
         integer(c_int) :: status
      end function c_mdl_epoch_ids

      !> Local; never fails (the C function itself: no handle, no status).
      subroutine mdl_before_mpi_finalize() bind(C, name='mdl_before_mpi_finalize')
      end subroutine mdl_before_mpi_finalize

      function c_mdl_finalize(h) result(status) bind(C, name='mdl_finalize')
         import :: c_int, c_ptr
         type(c_ptr), intent(inout) :: h
         integer(c_int) :: status
      end function c_mdl_finalize

      function c_mdl_stats_json(h, buf, len) result(full) bind(C, name='mdl_stats_json')
         import :: c_size_t, c_ptr
         type(c_ptr), value :: h, buf
         integer(c_size_t), value :: len
         integer(c_size_t) :: full
      end function c_mdl_stats_json

      function c_mdl_stats_json_job(h, buf, len, needed) result(status) bind(C, name='mdl_stats_json_job')
         import :: c_int, c_size_t, c_ptr
         type(c_ptr), value :: h, buf
         integer(c_size_t), value :: len
         integer(c_size_t), intent(out) :: needed
         integer(c_int) :: status
      end function c_mdl_stats_json_job

      function c_mdl_status_string(s) result(text) bind(C, name='mdl_status_string')
         import :: c_int, c_ptr
         integer(c_int), value :: s
         type(c_ptr) :: text
      end function c_mdl_status_string

      function c_mdl_last_error(buf, len) result(full) bind(C, name='mdl_last_error')
         import :: c_size_t, c_ptr
         type(c_ptr), value :: buf
         integer(c_size_t), value :: len
         integer(c_size_t) :: full
      end function c_mdl_last_error
   end interface

contains

   !> Collective over comm. Creates the loader (duplicates comm).
   !> comm: `comm` with `use mpi`, `comm%MPI_VAL` with `use mpi_f08`.
   subroutine mdl_init(loader, comm, ierr)
      type(mdl_loader), intent(inout) :: loader
      integer, intent(in) :: comm
      integer, intent(out), optional :: ierr
      type(c_ptr), target :: out
      integer :: status

      out = c_null_ptr
      if (c_associated(loader%handle)) then
         ! Passing no out-pointer makes every rank fail together (MDL_ERR_NULL_ARG here).
         status = c_mdl_init_f(int(comm, c_int), c_null_ptr)
         call finish(status, ierr, MDL_ERR_STATE, &
                     'mdl_init: this mdl_loader is already initialised (call mdl_finalize first)')
         return
      end if
      status = c_mdl_init_f(int(comm, c_int), c_loc(out))
      if (status == MDL_OK) loader%handle = out
      call finish(status, ierr)
   end subroutine mdl_init

   !> Collective over comm: mdl_init with comm split into replica groups that each hold a
   !> full copy of the dataset: group_size consecutive ranks per group (dividing comm's
   !> size), or 0 for one group per node. Each rank registers its part of its group's
   !> copy (mdl_replica_part); a rank fetches only inside its group, while the sampler
   !> still splits every epoch over all of comm. group_size must match on every rank.
   subroutine mdl_init_replicated(loader, comm, group_size, ierr)
      type(mdl_loader), intent(inout) :: loader
      integer, intent(in) :: comm, group_size
      integer, intent(out), optional :: ierr
      type(c_ptr), target :: out
      integer :: status

      out = c_null_ptr
      if (c_associated(loader%handle)) then
         ! Passing no out-pointer makes every rank fail together (MDL_ERR_NULL_ARG here).
         status = c_mdl_init_replicated_f(int(comm, c_int), int(group_size, c_int), c_null_ptr)
         call finish(status, ierr, MDL_ERR_STATE, &
                     'mdl_init_replicated: this mdl_loader is already initialised (call mdl_finalize first)')
         return
      end if
      status = c_mdl_init_replicated_f(int(comm, c_int), int(group_size, c_int), c_loc(out))
      if (status == MDL_OK) loader%handle = out
      call finish(status, ierr)
   end subroutine mdl_init_replicated

   !> Local. This rank's replica group (0-based), the number of groups, its rank in the
   !> group (0-based) and the group's size. Without groups: 0, 1, its rank, comm's size.
   subroutine mdl_replica_info(loader, group, num_groups, rank_in_group, group_size, ierr)
      type(mdl_loader), intent(in) :: loader
      integer, intent(out) :: group, num_groups, rank_in_group, group_size
      integer, intent(out), optional :: ierr
      integer(c_int32_t) :: values(4)
      integer :: status

      values = 0
      status = c_mdl_replica_info(loader%handle, values(1), values(2), values(3), values(4))
      group = values(1)
      num_groups = values(2)
      rank_in_group = values(3)
      group_size = values(4)
      call finish(status, ierr)
   end subroutine mdl_replica_info

   !> Local. This rank's even part of a dataset of num_samples samples, for its group
   !> to hold a full copy: 0-based ids first .. first + count - 1.
   subroutine mdl_replica_part(loader, num_samples, first, count, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int64), intent(in) :: num_samples
      integer(int64), intent(out) :: first, count
      integer, intent(out), optional :: ierr
      integer(c_int64_t) :: f, c
      integer :: status

      f = 0
      c = 0
      if (num_samples < 0) then
         first = 0
         count = 0
         call finish(MDL_ERR_INVALID_ARG, ierr, MDL_ERR_INVALID_ARG, 'mdl_replica_part: num_samples is negative')
         return
      end if
      status = c_mdl_replica_part(loader%handle, num_samples, f, c)
      first = f
      count = c
      call finish(status, ierr)
   end subroutine mdl_replica_part

   !> Collective. Registers this rank's shard (once per loader); the data is copied.
   !> offsets: n + 1 entries, offsets(1) == 0, non-decreasing, offsets(n+1) <= size(data);
   !> local sample i (1-based) is data(offsets(i)+1 : offsets(i+1)). An empty shard is
   !> offsets = [0_int64] (or a zero-size offsets array) with any data.
   subroutine mdl_register_shard(loader, data, offsets, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int8), intent(in), target, contiguous :: data(:)
      integer(int64), intent(in), target, contiguous :: offsets(:)
      integer, intent(out), optional :: ierr
      character(len=200) :: text
      type(c_ptr) :: pdata, poffsets
      integer(int64) :: n, i
      integer :: status

      n = max(size(offsets, kind=int64) - 1_int64, 0_int64)
      text = ''
      pdata = c_null_ptr
      poffsets = c_null_ptr
      if (size(data) > 0) pdata = c_loc(data(1))
      if (size(offsets) > 0) poffsets = c_loc(offsets(1))
      ! Bad offsets are named here as Fortran counts them (the library, counting from 0,
      ! would say offsets[i]). The library refuses the same offsets on every rank anyway.
      if (size(offsets) > 0) then
         i = findloc(offsets(2:) < offsets(:n), .true., dim=1, kind=int64)
         if (offsets(1) /= 0) then
            write (text, '(a,i0,a)') 'mdl_register_shard: offsets(1) = ', offsets(1), ', must be 0'
         else if (i > 0) then
            write (text, '(a,4(i0,a),i0)') 'mdl_register_shard: offsets decrease at sample ', i, &
               ': offsets(', i, ') = ', offsets(i), ' > offsets(', i + 1, ') = ', offsets(i + 1)
         else if (offsets(n + 1) > size(data, kind=int64)) then
            write (text, '(a,i0,a,i0)') 'mdl_register_shard: offsets(n+1) = ', offsets(n + 1), &
               ' is outside the data array, size(data) = ', size(data, kind=int64)
            ! No data for a non-empty shard: the library fails on every rank together.
            pdata = c_null_ptr
         end if
      end if
      status = c_mdl_register_shard(loader%handle, pdata, poffsets, int(n, c_int64_t))
      if (len_trim(text) > 0) then
         call finish(status, ierr, MDL_ERR_INVALID_ARG, trim(text))
      else
         call finish(status, ierr)
      end if
   end subroutine mdl_register_shard

   !> The number of samples over all ranks (valid ids are 0 .. n-1). Local.
   subroutine mdl_num_samples(loader, n, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int64), intent(out) :: n
      integer, intent(out), optional :: ierr
      integer(c_int64_t) :: value
      integer :: status

      value = 0
      status = c_mdl_num_samples(loader%handle, value)
      n = value
      call finish(status, ierr)
   end subroutine mdl_num_samples

   !> Size in bytes of the sample with 0-based global id `id`. Local, no communication.
   subroutine mdl_sample_size(loader, id, nbytes, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int64), intent(in) :: id
      integer(int64), intent(out) :: nbytes
      integer, intent(out), optional :: ierr
      character(len=100) :: text
      integer(c_int64_t) :: value
      integer :: status

      value = 0
      nbytes = 0
      if (id < 0) then
         ! The library would see 2^64 + id. A local call: nothing to agree with others.
         write (text, '(a,i0,a)') 'mdl_sample_size: id = ', id, ' is out of range (ids are 0-based)'
         call finish(MDL_ERR_OUT_OF_RANGE, ierr, MDL_ERR_OUT_OF_RANGE, trim(text))
         return
      end if
      status = c_mdl_sample_size(loader%handle, int(id, c_int64_t), value)
      nbytes = value
      call finish(status, ierr)
   end subroutine mdl_sample_size

   !> Collective. Fetches the samples with 0-based global ids `ids` (size n, may be 0,
   !> ids may repeat and differ per rank) into `out`, boundaries into out_offsets(1:n+1):
   !> sample ids(k) is out(out_offsets(k)+1 : out_offsets(k+1)). size(out_offsets) >= n+1.
   !> If out is too small: ierr = MDL_ERR_BUFFER_TOO_SMALL and out_offsets(n+1) holds
   !> the bytes needed (see also mdl_fetch_batch_alloc).
   subroutine mdl_fetch_batch(loader, ids, out, out_offsets, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int64), intent(in), target, contiguous :: ids(:)
      integer(int8), intent(inout), target, contiguous :: out(:)
      integer(int64), intent(inout), target, contiguous :: out_offsets(:)
      integer, intent(out), optional :: ierr
      character(len=200) :: text
      type(c_ptr) :: pids, pout, poffsets
      integer(c_int64_t) :: total
      integer(int64) :: k
      integer :: status, code

      code = MDL_OK
      text = ''
      pids = c_null_ptr
      pout = c_null_ptr
      poffsets = c_null_ptr
      if (size(ids) > 0) pids = c_loc(ids(1))
      if (size(out) > 0) pout = c_loc(out(1))
      if (size(out_offsets) > 0) poffsets = c_loc(out_offsets(1))
      if (size(out_offsets, kind=int64) < size(ids, kind=int64) + 1) then
         write (text, '(a,i0,a,i0)') 'mdl_fetch_batch: out_offsets has ', size(out_offsets, kind=int64), &
            ' entries, it needs size(ids) + 1 = ', size(ids, kind=int64) + 1
         code = MDL_ERR_INVALID_ARG
         poffsets = c_null_ptr   ! the library then fails on every rank together
      else if (size(ids) > 0) then
         ! An id out of range is named here by its 1-based position (the library would say
         ! ids[k], counting from 0); the library fails the call on every rank anyway. Before
         ! registration there is no range: the library says what is wrong.
         if (c_mdl_num_samples(loader%handle, total) /= MDL_OK) total = huge(total)
         k = findloc(ids < 0 .or. ids >= total, .true., dim=1, kind=int64)
         if (k > 0) then
            write (text, '(a,i0,a,i0,a,i0,a)') 'mdl_fetch_batch: ids(', k, ') = ', ids(k), &
               ' is out of range (ids are 0-based, num_samples = ', total, ')'
            code = MDL_ERR_OUT_OF_RANGE
         end if
      end if
      status = c_mdl_fetch_batch(loader%handle, pids, int(size(ids), c_size_t), pout, &
                                 int(size(out, kind=int64), c_int64_t), poffsets)
      if (status == MDL_ERR_BUFFER_TOO_SMALL .and. code == MDL_OK) then
         write (text, '(a,i0,a,i0,a)') 'mdl_fetch_batch: the batch needs ', out_offsets(size(ids) + 1), &
            ' bytes, size(out) is ', size(out, kind=int64), ' (out_offsets(size(ids)+1) holds the size needed)'
         code = MDL_ERR_BUFFER_TOO_SMALL
      end if
      if (code /= MDL_OK) then
         call finish(status, ierr, code, trim(text))
      else
         call finish(status, ierr)
      end if
   end subroutine mdl_fetch_batch

   !> Collective. As mdl_fetch_batch, but (re)allocates `out` and `out_offsets` as needed:
   !> on return size(out_offsets) == n + 1 and size(out) >= out_offsets(n+1) (an `out`
   !> that is already large enough is reused, so calling this in a loop allocates rarely).
   !> The sizes are computed locally (mdl_sample_size), so it costs no extra communication.
   subroutine mdl_fetch_batch_alloc(loader, ids, out, out_offsets, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int64), intent(in), contiguous :: ids(:)
      integer(int8), allocatable, intent(inout) :: out(:)
      integer(int64), allocatable, intent(inout) :: out_offsets(:)
      integer, intent(out), optional :: ierr
      integer(int64) :: total, nbytes
      integer(c_int64_t) :: value
      integer :: k, status

      total = 0
      do k = 1, size(ids)
         ! A bad id is reported by the collective fetch below, on every rank.
         status = c_mdl_sample_size(loader%handle, int(ids(k), c_int64_t), value)
         if (status /= MDL_OK) exit
         nbytes = value
         total = total + nbytes
      end do
      if (allocated(out_offsets)) then
         if (size(out_offsets) /= size(ids) + 1) deallocate (out_offsets)
      end if
      if (.not. allocated(out_offsets)) allocate (out_offsets(size(ids) + 1))
      if (allocated(out)) then
         if (size(out, kind=int64) < total) deallocate (out)
      end if
      if (.not. allocated(out)) allocate (out(max(total, 1_int64)))
      call mdl_fetch_batch(loader, ids, out, out_offsets, ierr)
   end subroutine mdl_fetch_batch_alloc

   !> Forces a backend (MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE) or returns to
   !> MDL_BACKEND_AUTO. Local; takes effect at the next fetch and must be set the same on
   !> every rank (a mismatch fails that fetch on every rank, it does not hang).
   subroutine mdl_set_backend(loader, backend, ierr)
      type(mdl_loader), intent(in) :: loader
      integer, intent(in) :: backend
      integer, intent(out), optional :: ierr
      integer :: status

      status = c_mdl_set_backend(loader%handle, int(backend, c_int))
      call finish(status, ierr)
   end subroutine mdl_set_backend

   !> Collective. Starts an epoch of the built-in sampler: a permutation of all ids drawn
   !> from (seed, epoch) (the identity without shuffle), the same on every rank and in
   !> every language, split like PyTorch's DistributedSampler (every rank ceil(N/P) ids,
   !> padded by wrapping around, or floor(N/P) with drop_last), in batches of batch_size
   !> (the last may be smaller). All arguments the same on every rank. mdl_fetch_batch is
   !> refused until the epoch ends (mdl_next_batch returns n = 0).
   subroutine mdl_epoch_begin(loader, seed, epoch, batch_size, shuffle, drop_last, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int64), intent(in) :: seed, epoch, batch_size
      logical, intent(in) :: shuffle, drop_last
      integer, intent(out), optional :: ierr
      integer :: status

      status = c_mdl_epoch_begin(loader%handle, int(seed, c_int64_t), int(epoch, c_int64_t), &
                                 int(batch_size, c_int64_t), merge(1_c_int, 0_c_int, shuffle), &
                                 merge(1_c_int, 0_c_int, drop_last))
      call finish(status, ierr)
   end subroutine mdl_epoch_begin

   !> Collective. Starts an epoch of this rank's own batches (any sampler's order), run as
   !> the built-in sampler's (steps agreed ahead, prefetch, mdl_epoch_seek): step s
   !> (0-based) fetches ids(batch_offsets(s+1)+1 : batch_offsets(s+2)), 0-based ids.
   !> batch_offsets runs from 0 to size(ids), increasing (no empty batch); every rank has
   !> its own ids but the same number of steps, size(batch_offsets) - 1 (checked: an
   !> error on every rank otherwise). Both arrays are copied.
   subroutine mdl_epoch_begin_ids(loader, ids, batch_offsets, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int64), intent(in), target, contiguous :: ids(:), batch_offsets(:)
      integer, intent(out), optional :: ierr
      character(len=200) :: text
      type(c_ptr) :: pids, pbounds
      integer :: status

      text = ''
      pids = c_null_ptr
      pbounds = c_null_ptr
      if (size(ids) > 0) pids = c_loc(ids(1))
      if (size(batch_offsets) > 0) pbounds = c_loc(batch_offsets(1))
      ! The library reads as many ids as the last offset says: it must be size(ids). A
      ! bad or empty batch_offsets is passed as NULL, which the library refuses on
      ! every rank (the others MDL_ERR_REMOTE); this rank says why in Fortran's terms.
      if (size(batch_offsets) == 0) then
         text = 'mdl_epoch_begin_ids: batch_offsets is empty (it needs steps + 1 entries)'
      else if (batch_offsets(size(batch_offsets)) /= size(ids, kind=int64)) then
         write (text, '(a,i0,a,i0,a,i0)') 'mdl_epoch_begin_ids: batch_offsets(', size(batch_offsets), ') = ', &
            batch_offsets(size(batch_offsets)), ', must be size(ids) = ', size(ids, kind=int64)
      end if
      if (len_trim(text) > 0) pbounds = c_null_ptr
      status = c_mdl_epoch_begin_ids(loader%handle, pids, pbounds, int(max(size(batch_offsets) - 1, 0), c_int64_t))
      if (len_trim(text) > 0) then
         call finish(status, ierr, MDL_ERR_INVALID_ARG, trim(text))
      else
         call finish(status, ierr)
      end if
   end subroutine mdl_epoch_begin_ids

   !> Collective. This rank's next batch of the epoch: n samples; ids(1:n) their 0-based
   !> global ids; sample k is data(offsets(k)+1 : offsets(k+1)), k = 1..n. The pointers
   !> point into the library's memory, valid until the next call on this loader (copy
   !> what must outlive the step; do not deallocate them). n = 0 (on every rank at once)
   !> marks the end of the epoch; the pointers then have size 0.
   subroutine mdl_next_batch(loader, ids, data, offsets, n, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int64), pointer, intent(out) :: ids(:), offsets(:)
      integer(int8), pointer, intent(out) :: data(:)
      integer, intent(out) :: n
      integer, intent(out), optional :: ierr
      type(c_ptr) :: pids, pdata, poffsets
      integer(c_size_t) :: count
      integer :: status

      count = 0
      status = c_mdl_next_batch(loader%handle, pids, pdata, poffsets, count)
      n = 0
      ids => no_ids
      offsets => no_offsets
      data => no_data
      if (status == MDL_OK .and. count > 0) then
         n = int(count)
         call c_f_pointer(pids, ids, [count])
         call c_f_pointer(poffsets, offsets, [count + 1])
         if (offsets(n + 1) > 0) call c_f_pointer(pdata, data, [offsets(n + 1)])
      end if
      call finish(status, ierr)
   end subroutine mdl_next_batch

   !> Collective. The next mdl_next_batch returns step `step` (0-based) of the current
   !> epoch, exactly as an uninterrupted run would (resuming from a checkpoint).
   subroutine mdl_epoch_seek(loader, step, ierr)
      type(mdl_loader), intent(in) :: loader
      integer(int64), intent(in) :: step
      integer, intent(out), optional :: ierr
      integer :: status

      status = c_mdl_epoch_seek(loader%handle, int(step, c_int64_t))
      call finish(status, ierr)
   end subroutine mdl_epoch_seek

   !> Batches the sampler fetches ahead on a library thread while the caller computes
   !> (0: none, the default). Local, the same on every rank; takes effect at the next
   !> mdl_epoch_begin. Needs MPI_Init_thread with MPI_THREAD_MULTIPLE (else no prefetch).
   subroutine mdl_set_prefetch(loader, depth, ierr)
      type(mdl_loader), intent(in) :: loader
      integer, intent(in) :: depth
      integer, intent(out), optional :: ierr
      integer :: status

      status = c_mdl_set_prefetch(loader%handle, int(depth, c_int32_t))
      call finish(status, ierr)
   end subroutine mdl_set_prefetch

   !> Local, no loader needed. The 0-based ids that rank `rank` (0-based) of `n_ranks` gets
   !> at step `step` (0-based) of the sampler's epoch over n_samples samples: exactly what
   !> mdl_next_batch returns there for the same arguments. ids(1:n) receives them (n = 0
   !> past the end); an ids array smaller than the count is MDL_ERR_BUFFER_TOO_SMALL with
   !> n set to the count needed.
   subroutine mdl_epoch_ids(n_samples, n_ranks, rank, seed, epoch, batch_size, shuffle, drop_last, step, &
                            ids, n, ierr)
      integer(int64), intent(in) :: n_samples, n_ranks, rank, seed, epoch, batch_size, step
      logical, intent(in) :: shuffle, drop_last
      integer(int64), intent(out) :: ids(:)
      integer(int64), intent(out) :: n
      integer, intent(out), optional :: ierr
      integer(c_size_t) :: count
      integer :: status

      count = 0
      status = c_mdl_epoch_ids(int(n_samples, c_int64_t), int(n_ranks, c_int64_t), int(rank, c_int64_t), &
                               int(seed, c_int64_t), int(epoch, c_int64_t), int(batch_size, c_int64_t), &
                               merge(1_c_int, 0_c_int, shuffle), merge(1_c_int, 0_c_int, drop_last), &
                               int(step, c_int64_t), ids, int(size(ids), c_size_t), count)
      n = int(count, int64)
      call finish(status, ierr)
   end subroutine mdl_epoch_ids

   !> Collective. Frees the loader; afterwards mdl_initialized(loader) is .false.
   !> Finalizing a loader that is not initialised does nothing.
   subroutine mdl_finalize(loader, ierr)
      type(mdl_loader), intent(inout) :: loader
      integer, intent(out), optional :: ierr
      integer :: status

      status = c_mdl_finalize(loader%handle)
      loader%handle = c_null_ptr
      call finish(status, ierr)
   end subroutine mdl_finalize

   !> The message of the last failed call of this thread ('' when none failed yet).
   function mdl_last_error() result(msg)
      character(len=:), allocatable :: msg
      character(kind=c_char), allocatable, target :: buf(:)
      integer(c_size_t) :: full
      integer :: i

      if (allocated(module_error)) then
         msg = module_error
         return
      end if
      full = c_mdl_last_error(c_null_ptr, 0_c_size_t)
      allocate (buf(full + 1))
      full = c_mdl_last_error(c_loc(buf(1)), int(size(buf), c_size_t))
      allocate (character(len=int(full)) :: msg)
      do i = 1, int(full)
         msg(i:i) = buf(i)
      end do
   end function mdl_last_error

   !> This rank's statistics as a JSON object (steps and seconds per engine, samples,
   !> bytes, the estimator's decisions, the calibration; see include/mdloader.h). Local.
   !> '' when the loader is not initialised.
   function mdl_stats_json(loader) result(json)
      type(mdl_loader), intent(in) :: loader
      character(len=:), allocatable :: json
      character(kind=c_char), allocatable, target :: buf(:)
      integer(c_size_t) :: full
      integer :: i

      ! Asked again until the text fits: it may grow between two calls while the
      ! library's prefetch thread counts a step.
      full = 4095
      do
         if (allocated(buf)) deallocate (buf)
         allocate (buf(full + 1))
         full = c_mdl_stats_json(loader%handle, c_loc(buf(1)), int(size(buf), c_size_t))
         if (full < size(buf)) exit
         full = full + 1024
      end do
      allocate (character(len=int(full)) :: json)
      do i = 1, int(full)
         json(i:i) = buf(i)
      end do
   end function mdl_stats_json

   !> Collective. The whole job's statistics as one JSON object, the same text on every
   !> rank (bytes, samples and seconds over all ranks; see mdl_stats_json_job in
   !> include/mdloader.h). Refused (MDL_ERR_STATE) during a sampler epoch; json is ''
   !> on an error.
   subroutine mdl_stats_json_job(loader, json, ierr)
      type(mdl_loader), intent(in) :: loader
      character(len=:), allocatable, intent(out) :: json
      integer, intent(out), optional :: ierr
      character(kind=c_char), allocatable, target :: buf(:)
      integer(c_size_t) :: needed
      integer :: status, i

      allocate (buf(4096))
      status = c_mdl_stats_json_job(loader%handle, c_loc(buf(1)), int(size(buf), c_size_t), needed)
      if (status == MDL_OK .and. needed >= size(buf, kind=c_size_t)) then
         ! Longer than the first guess: the same length on every rank, so every rank
         ! makes this second collective call.
         deallocate (buf)
         allocate (buf(needed + 1))
         status = c_mdl_stats_json_job(loader%handle, c_loc(buf(1)), int(size(buf), c_size_t), needed)
      end if
      if (status /= MDL_OK) needed = 0
      allocate (character(len=int(needed)) :: json)
      do i = 1, int(needed)
         json(i:i) = buf(i)
      end do
      call finish(status, ierr)
   end subroutine mdl_stats_json_job

   !> Static text for a status code, e.g. mdl_status_string(MDL_ERR_OUT_OF_RANGE).
   function mdl_status_string(status) result(text)
      integer, intent(in) :: status
      character(len=:), allocatable :: text
      character(kind=c_char), pointer :: chars(:)
      type(c_ptr) :: p
      integer :: n, i

      p = c_mdl_status_string(int(status, c_int))
      if (.not. c_associated(p)) then
         text = ''
         return
      end if
      call c_f_pointer(p, chars, [256])
      do n = 0, size(chars) - 1
         if (chars(n + 1) == c_null_char) exit
      end do
      allocate (character(len=n) :: text)
      do i = 1, n
         text(i:i) = chars(i)
      end do
   end function mdl_status_string

   !> .true. between a successful mdl_init and mdl_finalize.
   logical function mdl_initialized(loader)
      type(mdl_loader), intent(in) :: loader
      mdl_initialized = c_associated(loader%handle)
   end function mdl_initialized

   !> The C handle (mdl_loader *), to pass the loader to C code of your own.
   function mdl_c_handle(loader) result(handle)
      type(mdl_loader), intent(in) :: loader
      type(c_ptr) :: handle
      handle = loader%handle
   end function mdl_c_handle

   ! Sets ierr (or stops when it is absent) and keeps mdl_last_error right. `code` and
   ! `local` are the status and message of an error this module found itself (the
   ! library has failed the call on every rank too); absent: take the library's.
   subroutine finish(status, ierr, code, local)
      integer, intent(in) :: status
      integer, intent(out), optional :: ierr
      integer, intent(in), optional :: code
      character(len=*), intent(in), optional :: local
      integer :: result

      result = status
      if (present(local) .and. status /= MDL_OK) then
         if (present(code)) result = code
         module_error = local
      else if (status /= MDL_OK) then
         if (allocated(module_error)) deallocate (module_error)
      end if
      if (present(ierr)) then
         ierr = result
      else if (result /= MDL_OK) then
         write (error_unit, '(a,i0,a,a,a,a)') 'mdloader: error ', result, ' (', mdl_status_string(result), '): ', &
            mdl_last_error()
         error stop 'mdloader: a call failed and no ierr argument was given'
      end if
   end subroutine finish

end module mdloader
