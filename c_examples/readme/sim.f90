! The Fortran program of docs/c-and-fortran.md. tests/run_cmake_tests.sh builds it by
! by-hand.txt's line and by fortran/CMakeLists.txt.
program sim
   use mpi
   use mdloader
   use, intrinsic :: iso_fortran_env, only: int8, int64
   implicit none
   type(mdl_loader) :: loader
   integer :: ierr, rank
   integer(int8) :: data(5) = [1_int8, 2_int8, 3_int8, 4_int8, 5_int8]
   integer(int64) :: offsets(4) = [0_int64, 2_int64, 2_int64, 5_int64]
   integer(int64) :: ids(1), out_offsets(2), n_total
   integer(int8) :: out(16)

   call MPI_Init(ierr)
   call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
   ! Without ierr, a failing call prints its message and stops the program.
   call mdl_init(loader, MPI_COMM_WORLD)           ! with use mpi_f08: MPI_COMM_WORLD%MPI_VAL
   call mdl_register_shard(loader, data, offsets)  ! 3 samples: 2, 0 and 3 bytes
   call mdl_num_samples(loader, n_total)
   ids(1) = n_total - 1                            ! global ids are 0-based
   ! With ierr, the caller handles the error.
   call mdl_fetch_batch(loader, ids, out, out_offsets, ierr)
   if (ierr /= MDL_OK) then
      print '(a,i0,2a)', 'rank ', rank, ': ', mdl_last_error()
      error stop 1
   end if
   print '(a,i0,a,i0,a,i0,a)', 'rank ', rank, ': sample ', ids(1), ' has ', &
      out_offsets(2) - out_offsets(1), ' bytes'
   call mdl_finalize(loader)
   call MPI_Finalize(ierr)
end program sim
