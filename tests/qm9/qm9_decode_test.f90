!> QM9 through MDLoader from Fortran: the same test as qm9_decode_test.c, with module
!> mdloader and the Fortran decoder (module qm9_record). Every rank registers its slice
!> of a QM9 pack file, fetches the molecules of the reference file (rows taken straight
!> from the source CSV) in batches over the one-sided, collective and automatic engines
!> in turn, and compares each decoded record with the CSV values: row (= sample id), QM9
!> index, atomic numbers, positions and gap (the CSV decimals rounded to binary32, bit for
!> bit) and the edge list (recomputed from the positions by the layout's rule).
!>
!>   mpirun -n 2 qm9_decode_test_f PACK.qm9g REFERENCE.txt [batch]
program qm9_decode_test_f
   use mpi
   use mdloader
   use qm9_record
   use, intrinsic :: iso_fortran_env, only: int8, int64, real32, real64, error_unit, output_unit
   implicit none

   type :: ref_mol
      integer(int64) :: row
      integer(int64) :: mol_index
      integer :: n_atoms
      real(real64) :: gap
      integer, allocatable :: z(:)
      real(real64), allocatable :: xyz(:, :)
   end type ref_mol

   type(mdl_loader) :: loader
   type(ref_mol), allocatable :: ref(:)
   type(qm9_molecule) :: mol
   integer(int8), allocatable :: data(:), out(:)
   integer(int64), allocatable :: offsets(:), ids(:), out_offsets(:)
   integer(int64) :: first, total, checked, edges, atoms, all_checked, all_edges, all_atoms
   integer :: rank, nranks, mpierr, ierr, nref, batch, b, k, n, step, start, u
   integer(int64) :: errors, all_errors         ! int64 like the other reductions
   integer, allocatable :: which(:)
   integer, parameter :: engines(3) = [MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE, MDL_BACKEND_AUTO]
   character(len=1024) :: pack_path, ref_path, arg

   call MPI_Init(mpierr)
   call MPI_Comm_rank(MPI_COMM_WORLD, rank, mpierr)
   call MPI_Comm_size(MPI_COMM_WORLD, nranks, mpierr)
   if (command_argument_count() < 2) then
      if (rank == 0) write (error_unit, '(a)') 'usage: qm9_decode_test_f PACK.qm9g REFERENCE.txt [batch]'
      call MPI_Finalize(mpierr)
      stop 2
   end if
   call get_command_argument(1, pack_path)
   call get_command_argument(2, ref_path)
   batch = 64
   if (command_argument_count() >= 3) then
      call get_command_argument(3, arg)
      read (arg, *) batch
   end if
   errors = 0

   call qm9_pack_read_slice(trim(pack_path), rank, nranks, data, offsets, first, ierr)
   if (ierr /= QM9_OK) then
      write (error_unit, '(a,i0,a,a)') 'rank ', rank, ': ', qm9_strerror(ierr)
      call MPI_Abort(MPI_COMM_WORLD, 2, mpierr)
   end if
   call read_reference(trim(ref_path))

   call mdl_init(loader, MPI_COMM_WORLD, ierr)
   if (ierr == MDL_OK) call mdl_register_shard(loader, data, offsets, ierr)
   deallocate (data)
   if (ierr == MDL_OK) call mdl_num_samples(loader, total, ierr)
   if (ierr /= MDL_OK) then
      write (error_unit, '(a,i0,a,a)') 'rank ', rank, ': ', mdl_last_error()
      call MPI_Abort(MPI_COMM_WORLD, 2, mpierr)
   end if

   checked = 0
   edges = 0
   atoms = 0
   start = int(int(nref, int64) * rank / nranks)        ! each rank starts elsewhere
   step = 0
   do b = 0, nref - 1, batch
      n = min(batch, nref - b)
      which = [(modulo(start + b + k, nref) + 1, k = 0, n - 1)]
      ids = [(ref(which(k))%row, k = 1, n)]              ! 0-based global ids
      call mdl_set_backend(loader, engines(modulo(step, 3) + 1), ierr)
      if (ierr == MDL_OK) call mdl_fetch_batch_alloc(loader, ids, out, out_offsets, ierr)
      if (ierr /= MDL_OK) then
         call fail('fetch: ' // mdl_status_string(ierr) // ': ' // mdl_last_error())
         exit
      end if
      do k = 1, n
         call check(out(out_offsets(k) + 1:out_offsets(k + 1)), ref(which(k)))
      end do
      checked = checked + n
      step = step + 1
   end do
   call mdl_finalize(loader, ierr)

   call MPI_Allreduce(errors, all_errors, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, mpierr)
   call MPI_Allreduce(checked, all_checked, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, mpierr)
   call MPI_Allreduce(edges, all_edges, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, mpierr)
   call MPI_Allreduce(atoms, all_atoms, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, mpierr)
   if (rank == 0) write (output_unit, '(a,i0,a,i0,a,i0,a,i0,a,i0,a,i0,a)') 'qm9_decode_test (Fortran): ', nranks, &
      ' ranks, ', total, ' samples in the loader, ', all_checked, ' molecules checked (', all_atoms, ' atoms, ', &
      all_edges, ' edges): ', all_errors, ' mismatches'
   call MPI_Finalize(mpierr)
   if (all_errors /= 0 .or. all_checked /= int(nref, int64) * nranks) error stop 1

contains

   subroutine read_reference(path)
      character(len=*), intent(in) :: path
      integer :: i, a, ios
      open (newunit=u, file=path, status='old', action='read', iostat=ios)
      if (ios /= 0) then
         write (error_unit, '(a,a)') 'cannot open ', path
         call MPI_Abort(MPI_COMM_WORLD, 2, mpierr)
      end if
      read (u, *) nref
      allocate (ref(nref))
      do i = 1, nref
         read (u, *) ref(i)%row, ref(i)%mol_index, ref(i)%n_atoms, ref(i)%gap
         allocate (ref(i)%z(ref(i)%n_atoms), ref(i)%xyz(3, ref(i)%n_atoms))
         do a = 1, ref(i)%n_atoms
            read (u, *) ref(i)%z(a), ref(i)%xyz(:, a)
         end do
      end do
      close (u)
   end subroutine read_reference

   subroutine check(bytes, m)
      integer(int8), intent(in) :: bytes(:)
      type(ref_mol), intent(in) :: m
      integer :: i, j, a, c, kk, ierr2
      character(len=200) :: text

      call qm9_decode(bytes, mol, ierr2)
      if (ierr2 /= QM9_OK) then
         write (text, '(a,i0,a,a)') 'row ', m%row, ': ', qm9_strerror(ierr2)
         call fail(trim(text))
         return
      end if
      if (mol%row /= m%row .or. mol%mol_index /= m%mol_index .or. mol%n_atoms /= m%n_atoms) then
         write (text, '(a,i0,a,i0,a,i0,a,i0)') 'row ', m%row, ': got row ', mol%row, ', index ', mol%mol_index, &
            ', atoms ', mol%n_atoms
         call fail(trim(text))
         return
      end if
      if (.not. same(mol%gap, real(m%gap, real32))) then
         write (text, '(a,i0,a)') 'row ', m%row, ': gap differs'
         call fail(trim(text))
      end if
      do a = 1, mol%n_atoms
         if (mol%z(a) /= m%z(a)) then
            write (text, '(a,i0,a,i0,a)') 'row ', m%row, ' atom ', a, ': Z differs'
            call fail(trim(text))
         end if
         do c = 1, 3
            if (.not. same(mol%pos(c, a), real(m%xyz(c, a), real32))) then
               write (text, '(a,i0,a,i0,a,i0,a)') 'row ', m%row, ' atom ', a, ' axis ', c, ': position differs'
               call fail(trim(text))
            end if
         end do
      end do
      kk = 0                           ! the edges must be exactly the pairs within the cutoff, sorted
      do i = 1, mol%n_atoms
         do j = 1, mol%n_atoms
            if (.not. qm9_within_cutoff(mol, i, j)) cycle
            kk = kk + 1
            if (kk > mol%n_edges) exit
            if (mol%edges(1, kk) /= i .or. mol%edges(2, kk) /= j) then
               write (text, '(a,i0,a,i0,a)') 'row ', m%row, ' edge ', kk, ' differs'
               call fail(trim(text))
               return
            end if
         end do
      end do
      if (kk /= mol%n_edges) then
         write (text, '(a,i0,a,i0,a,i0,a)') 'row ', m%row, ': ', mol%n_edges, ' edges, ', kk, ' pairs within the cutoff'
         call fail(trim(text))
      end if
      edges = edges + mol%n_edges
      atoms = atoms + mol%n_atoms
   end subroutine check

   logical function same(x, y)
      real(real32), intent(in) :: x, y
      same = transfer(x, 1) == transfer(y, 1)        ! bit for bit
   end function same

   subroutine fail(what)
      character(len=*), intent(in) :: what
      errors = errors + 1
      if (errors <= 10) write (error_unit, '(a,i0,a,a)') 'rank ', rank, ': ', what
   end subroutine fail

end program qm9_decode_test_f
