!> Fortran decoder of QM9 graph records (record version 1) and reader of QM9 pack files
!> (pack version 1), as specified in docs/qm9_format.md and written by
!> `python -m mdloader.qm9 convert`. Independent of MPI and of module mdloader.
!>
!>   use qm9_record
!>   type(qm9_molecule) :: mol
!>   call qm9_decode(out(out_offsets(k)+1:out_offsets(k+1)), mol, ierr)
!>   ! mol%z(i), mol%pos(:, i) for atom i = 1..mol%n_atoms; mol%edges(:, k) for k = 1..mol%n_edges
!>
!> Values are assembled from little-endian bytes, so the decoder works on any host.
!> Fortran conventions: atoms are numbered from 1 here. mol%edges holds 1-BASED atom
!> numbers (the record stores 0-based indices: edges(:, k) = record's (source, target) + 1).
module qm9_record
   use, intrinsic :: iso_fortran_env, only: int8, int16, int32, int64, real32, real64
   implicit none
   private

   integer, parameter, public :: QM9_RECORD_VERSION = 1
   integer, parameter, public :: QM9_PACK_VERSION = 1
   integer, parameter, public :: QM9_HEADER_BYTES = 32

   !> Error codes (the same values as the C decoder's enum qm9_error).
   integer, parameter, public :: QM9_OK = 0
   integer, parameter, public :: QM9_ERR_SHORT = 1      !< fewer bytes than the record needs
   integer, parameter, public :: QM9_ERR_MAGIC = 2      !< not "QM9G" / "QM9GPACK"
   integer, parameter, public :: QM9_ERR_VERSION = 3    !< a version this reader does not know
   integer, parameter, public :: QM9_ERR_SIZE = 4       !< record_bytes disagrees with the layout or the buffer
   integer, parameter, public :: QM9_ERR_IO = 5         !< a pack file could not be opened or read

   !> One decoded molecule (copies of the record's values).
   type, public :: qm9_molecule
      integer :: version = 0
      integer :: n_atoms = 0
      integer :: n_edges = 0
      integer(int64) :: mol_index = 0      !< QM9's molecule number, 1..133885
      integer(int64) :: row = -1           !< 0-based position in the data set (= the sample id)
      real(real32) :: gap = 0              !< HOMO-LUMO gap, hartree
      real(real32) :: cutoff = 0           !< edge radius, Angstrom
      integer(int64) :: record_bytes = 0
      integer, allocatable :: z(:)         !< (n_atoms) atomic numbers
      real(real32), allocatable :: pos(:, :)   !< (3, n_atoms) positions, Angstrom
      integer, allocatable :: edges(:, :)  !< (2, n_edges) source, target: 1-BASED atom numbers
   end type qm9_molecule

   public :: qm9_decode, qm9_record_size, qm9_within_cutoff, qm9_pack_read_slice, qm9_strerror

contains

   !> Bytes of a record with n_atoms atoms and n_edges edges.
   pure integer(int64) function qm9_record_size(n_atoms, n_edges)
      integer(int64), intent(in) :: n_atoms, n_edges
      qm9_record_size = QM9_HEADER_BYTES + n_atoms + modulo(4 - modulo(n_atoms, 4_int64), 4_int64) &
                        + 12 * n_atoms + 8 * n_edges
   end function qm9_record_size

   pure integer(int64) function le(bytes, at, nbytes)
      integer(int8), intent(in) :: bytes(:)
      integer(int64), intent(in) :: at      ! 0-based byte offset
      integer, intent(in) :: nbytes
      integer :: k
      le = 0
      do k = nbytes, 1, -1
         le = ior(ishft(le, 8), iand(int(bytes(at + k), int64), 255_int64))
      end do
   end function le

   pure real(real32) function lef32(bytes, at)
      integer(int8), intent(in) :: bytes(:)
      integer(int64), intent(in) :: at
      integer(int64) :: bits
      bits = le(bytes, at, 4)
      if (bits >= 2147483648_int64) bits = bits - 4294967296_int64
      lef32 = transfer(int(bits, int32), lef32)
   end function lef32

   !> Decodes one record; `bytes` must be exactly the record (e.g. one sample of a batch).
   subroutine qm9_decode(bytes, mol, ierr)
      integer(int8), intent(in) :: bytes(:)
      type(qm9_molecule), intent(inout) :: mol
      integer, intent(out) :: ierr
      integer(int64) :: n, e, a, i, k
      character(len=4), parameter :: magic = 'QM9G'

      ierr = QM9_OK
      if (size(bytes) < QM9_HEADER_BYTES) then
         ierr = QM9_ERR_SHORT
         return
      end if
      do k = 1, 4
         if (bytes(k) /= int(ichar(magic(k:k)), int8)) then
            ierr = QM9_ERR_MAGIC
            return
         end if
      end do
      mol%version = int(le(bytes, 4_int64, 2))
      if (mol%version /= QM9_RECORD_VERSION) then
         ierr = QM9_ERR_VERSION
         return
      end if
      n = le(bytes, 6_int64, 2)
      e = le(bytes, 8_int64, 4)
      mol%n_atoms = int(n)
      mol%n_edges = int(e)
      mol%mol_index = le(bytes, 12_int64, 4)
      mol%row = le(bytes, 16_int64, 4)
      mol%gap = lef32(bytes, 20_int64)
      mol%cutoff = lef32(bytes, 24_int64)
      mol%record_bytes = le(bytes, 28_int64, 4)
      if (mol%record_bytes /= qm9_record_size(n, e)) then
         ierr = QM9_ERR_SIZE
         return
      end if
      if (size(bytes, kind=int64) < mol%record_bytes) then
         ierr = QM9_ERR_SHORT
         return
      else if (size(bytes, kind=int64) > mol%record_bytes) then
         ierr = QM9_ERR_SIZE
         return
      end if
      if (allocated(mol%z)) deallocate (mol%z)
      if (allocated(mol%pos)) deallocate (mol%pos)
      if (allocated(mol%edges)) deallocate (mol%edges)
      allocate (mol%z(n), mol%pos(3, n), mol%edges(2, e))
      do i = 1, n
         mol%z(i) = int(le(bytes, QM9_HEADER_BYTES + i - 1, 1))
      end do
      a = QM9_HEADER_BYTES + n + modulo(4 - modulo(n, 4_int64), 4_int64)
      do i = 1, n
         do k = 1, 3
            mol%pos(k, i) = lef32(bytes, a + 12 * (i - 1) + 4 * (k - 1))
         end do
      end do
      a = a + 12 * n
      do i = 1, e
         mol%edges(1, i) = int(le(bytes, a + 8 * (i - 1), 4)) + 1
         mol%edges(2, i) = int(le(bytes, a + 8 * (i - 1) + 4, 4)) + 1
      end do
   end subroutine qm9_decode

   !> Whether atoms i and j (1-based) are joined by the layout's edge rule, from the
   !> stored positions: double-precision squared distance <= cutoff**2.
   logical function qm9_within_cutoff(mol, i, j)
      type(qm9_molecule), intent(in) :: mol
      integer, intent(in) :: i, j
      real(real64) :: d(3), p(3), d2, c
      integer :: k
      do k = 1, 3
         d(k) = real(mol%pos(k, i), real64) - real(mol%pos(k, j), real64)
      end do
      ! Each product rounded on its own, then summed left to right (build without FMA
      ! contraction, e.g. gfortran -ffp-contract=off, for bit-exact agreement).
      p = d * d
      d2 = (p(1) + p(2)) + p(3)
      c = real(mol%cutoff, real64)
      qm9_within_cutoff = i /= j .and. d2 <= c * c
   end function qm9_within_cutoff

   !> Reads rank's contiguous slice of a pack file (records floor(n*rank/nranks) ..
   !> floor(n*(rank+1)/nranks) - 1): `data` (the records back to back), `offsets`
   !> (count + 1 entries from 0) and `first` (0-based id of the first record), ready for
   !> mdl_register_shard(loader, data, offsets, ierr).
   subroutine qm9_pack_read_slice(path, rank, nranks, data, offsets, first, ierr)
      character(len=*), intent(in) :: path
      integer, intent(in) :: rank, nranks
      integer(int8), allocatable, intent(out) :: data(:)
      integer(int64), allocatable, intent(out) :: offsets(:)
      integer(int64), intent(out) :: first
      integer, intent(out) :: ierr
      integer(int8) :: head(24)
      integer(int8), allocatable :: raw(:)
      integer(int64) :: n, lo, hi, m, k, base, data_start
      integer :: unit, ios
      character(len=8), parameter :: magic = 'QM9GPACK'

      first = 0
      ierr = QM9_OK
      open (newunit=unit, file=path, access='stream', form='unformatted', status='old', action='read', iostat=ios)
      if (ios /= 0) then
         ierr = QM9_ERR_IO
         return
      end if
      read (unit, pos=1, iostat=ios) head
      if (ios /= 0) then
         ierr = QM9_ERR_IO
      else
         do k = 1, 8
            if (head(k) /= int(ichar(magic(k:k)), int8)) ierr = QM9_ERR_MAGIC
         end do
         if (ierr == QM9_OK) then
            if (le(head, 8_int64, 4) /= QM9_PACK_VERSION .or. le(head, 12_int64, 4) /= QM9_RECORD_VERSION) &
               ierr = QM9_ERR_VERSION
         end if
      end if
      if (ierr /= QM9_OK) then
         close (unit)
         return
      end if
      n = le(head, 16_int64, 8)
      lo = n * rank / nranks
      hi = n * (rank + 1) / nranks
      m = hi - lo
      allocate (raw(8 * (m + 1)), offsets(m + 1))
      read (unit, pos=24 + 8 * lo + 1, iostat=ios) raw
      if (ios /= 0) then
         ierr = QM9_ERR_IO
         close (unit)
         return
      end if
      base = le(raw, 0_int64, 8)
      do k = 0, m
         offsets(k + 1) = le(raw, 8 * k, 8) - base
      end do
      data_start = 24 + 8 * (n + 1)
      allocate (data(offsets(m + 1)))
      if (size(data) > 0) then
         read (unit, pos=data_start + base + 1, iostat=ios) data
         if (ios /= 0) ierr = QM9_ERR_IO
      end if
      close (unit)
      first = lo
   end subroutine qm9_pack_read_slice

   !> Text for an error code.
   function qm9_strerror(ierr) result(text)
      integer, intent(in) :: ierr
      character(len=:), allocatable :: text
      select case (ierr)
      case (QM9_OK)
         text = 'ok'
      case (QM9_ERR_SHORT)
         text = 'QM9 record: fewer bytes than the record needs'
      case (QM9_ERR_MAGIC)
         text = 'QM9: bad magic (not a QM9 record or pack file)'
      case (QM9_ERR_VERSION)
         text = 'QM9: unsupported version'
      case (QM9_ERR_SIZE)
         text = 'QM9 record: record_bytes disagrees with the layout or the buffer'
      case (QM9_ERR_IO)
         text = 'QM9 pack file: cannot open or read'
      case default
         text = 'QM9: unknown error'
      end select
   end function qm9_strerror

end module qm9_record
