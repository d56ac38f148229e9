//! The library's error type: a status code for C plus a human-readable message.

use std::fmt;

/// Status codes of the C API. The numeric values are part of the ABI.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum mdl_status {
    /// Success.
    MDL_OK = 0,
    /// A required pointer was NULL.
    MDL_ERR_NULL_ARG = 1,
    /// Malformed offsets, bad enum value, inconsistent settings across ranks, ...
    MDL_ERR_INVALID_ARG = 2,
    /// A sample id >= mdl_num_samples.
    MDL_ERR_OUT_OF_RANGE = 3,
    /// out_cap too small; out_offsets[n] holds the size needed.
    MDL_ERR_BUFFER_TOO_SMALL = 4,
    /// Call out of order: fetch before register, register twice, ...
    MDL_ERR_STATE = 5,
    /// MPI returned an error.
    MDL_ERR_MPI = 6,
    /// An allocation failed.
    MDL_ERR_NO_MEMORY = 7,
    /// An internal bug was caught at the boundary.
    MDL_ERR_PANIC = 8,
    /// Another rank failed this collective call.
    MDL_ERR_REMOTE = 9,
    /// A collective waited longer than `MDL_TIMEOUT` seconds (a peer is stuck or in
    /// another call). The loader is unusable afterwards (`mdl_finalize` frees its memory
    /// only), MPI may still write into the buffers of the call that timed out, and
    /// MPI_Finalize may hang on the pending request: call MPI_Abort.
    MDL_ERR_TIMEOUT = 10,
    /// The ranks made different collective calls on this loader (one fetches while
    /// another finalizes, say: a rank left its loop early or had more batches). Every
    /// rank in either call returns it, naming both calls. It is found in a call's first
    /// agreement, so nothing was done: the loader works on once the ranks make the same
    /// calls again (`mdl_finalize` leaves `*h` for that). Within a running epoch it ends
    /// the epoch (its steps were agreed ahead).
    MDL_ERR_CALL_MISMATCH = 11,
}

impl mdl_status {
    /// All codes, in numeric order.
    pub(crate) const ALL: [mdl_status; 12] = [
        mdl_status::MDL_OK,
        mdl_status::MDL_ERR_NULL_ARG,
        mdl_status::MDL_ERR_INVALID_ARG,
        mdl_status::MDL_ERR_OUT_OF_RANGE,
        mdl_status::MDL_ERR_BUFFER_TOO_SMALL,
        mdl_status::MDL_ERR_STATE,
        mdl_status::MDL_ERR_MPI,
        mdl_status::MDL_ERR_NO_MEMORY,
        mdl_status::MDL_ERR_PANIC,
        mdl_status::MDL_ERR_REMOTE,
        mdl_status::MDL_ERR_TIMEOUT,
        mdl_status::MDL_ERR_CALL_MISMATCH,
    ];

    /// The status with this numeric value, if there is one.
    pub fn from_code(code: i64) -> Option<mdl_status> {
        Self::ALL.iter().copied().find(|s| *s as i64 == code)
    }

    /// Static description, NUL-terminated so the C API can hand it out as is.
    pub fn description(self) -> &'static str {
        match self {
            mdl_status::MDL_OK => "success\0",
            mdl_status::MDL_ERR_NULL_ARG => "a required pointer was NULL\0",
            mdl_status::MDL_ERR_INVALID_ARG => "invalid argument\0",
            mdl_status::MDL_ERR_OUT_OF_RANGE => "sample id out of range\0",
            mdl_status::MDL_ERR_BUFFER_TOO_SMALL => "output buffer too small\0",
            mdl_status::MDL_ERR_STATE => "call out of order\0",
            mdl_status::MDL_ERR_MPI => "MPI error\0",
            mdl_status::MDL_ERR_NO_MEMORY => "out of memory\0",
            mdl_status::MDL_ERR_PANIC => "internal error (panic caught at the C boundary)\0",
            mdl_status::MDL_ERR_REMOTE => "another rank failed this collective call\0",
            mdl_status::MDL_ERR_TIMEOUT => "a collective call timed out (MDL_TIMEOUT)\0",
            mdl_status::MDL_ERR_CALL_MISMATCH => "the ranks made different collective calls\0",
        }
    }

    /// The enumerator's name, for messages that tell one rank another's status.
    pub fn name(self) -> &'static str {
        match self {
            mdl_status::MDL_OK => "MDL_OK",
            mdl_status::MDL_ERR_NULL_ARG => "MDL_ERR_NULL_ARG",
            mdl_status::MDL_ERR_INVALID_ARG => "MDL_ERR_INVALID_ARG",
            mdl_status::MDL_ERR_OUT_OF_RANGE => "MDL_ERR_OUT_OF_RANGE",
            mdl_status::MDL_ERR_BUFFER_TOO_SMALL => "MDL_ERR_BUFFER_TOO_SMALL",
            mdl_status::MDL_ERR_STATE => "MDL_ERR_STATE",
            mdl_status::MDL_ERR_MPI => "MDL_ERR_MPI",
            mdl_status::MDL_ERR_NO_MEMORY => "MDL_ERR_NO_MEMORY",
            mdl_status::MDL_ERR_PANIC => "MDL_ERR_PANIC",
            mdl_status::MDL_ERR_REMOTE => "MDL_ERR_REMOTE",
            mdl_status::MDL_ERR_TIMEOUT => "MDL_ERR_TIMEOUT",
            mdl_status::MDL_ERR_CALL_MISMATCH => "MDL_ERR_CALL_MISMATCH",
        }
    }
}

/// An error with the status code the C caller sees and a message for `mdl_last_error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: mdl_status,
    pub message: String,
}

impl Error {
    pub fn new(status: mdl_status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
    pub fn null_arg(what: &str) -> Error {
        Error::new(mdl_status::MDL_ERR_NULL_ARG, format!("{what} is NULL"))
    }
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(mdl_status::MDL_ERR_INVALID_ARG, message)
    }
    pub fn state(message: impl Into<String>) -> Error {
        Error::new(mdl_status::MDL_ERR_STATE, message)
    }
    pub fn timeout(message: impl Into<String>) -> Error {
        Error::new(mdl_status::MDL_ERR_TIMEOUT, message)
    }
    pub fn no_memory(bytes: u64) -> Error {
        Error::new(mdl_status::MDL_ERR_NO_MEMORY, format!("could not allocate {bytes} bytes"))
    }
}

/// Whether `result` succeeded, without its value: what a rank brings to an agreement
/// about a step it took on its own (an allocation, a window) before the ranks go on.
pub fn outcome_of<T>(result: &Result<T>) -> Result<()> {
    result.as_ref().map(|_| ()).map_err(Clone::clone)
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
