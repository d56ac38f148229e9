//! Agreement before communication: every collective entry point first combines, in one
//! small all-reduce, whether any rank failed its local checks and whatever else the
//! ranks must agree on (the backend setting, the estimator's predictions, settings that
//! must be identical). No rank then enters a data exchange that another rank skipped,
//! so a bad argument on one rank turns into an error on all ranks instead of a hang.
//!
//! All fields are combined with MAX over `f64` (exact for integers below 2^53), and
//! minima are taken as the maximum of negated values.
//!
//! Every agreement carries the call its rank is in ([`crate::call`]): ranks that made
//! different calls (one left its loop early and finalizes while another fetches) are
//! told so, naming both calls, instead of reading each other's values as their own.
//! MPI requires the ranks' reductions to have the same length; the first agreement of
//! every call on a registered loader goes through its reserved [`AgreementBuffers`],
//! which pad it to one length, so that such a mismatch meets a reduction that works.

use crate::call::{self, Call};
use crate::memory;
use crate::backend::Backend;
use crate::error::{Error, Result, mdl_status, outcome_of};
use crate::mpi::{Comm, Reduction};

/// This rank's contribution.
#[derive(Clone, Debug)]
pub struct Proposal {
    pub error: Option<Error>,
    pub backend: Backend,
    /// Values to combine by maximum (the estimator's per-rank predictions, ...).
    pub maxima: Vec<f64>,
    /// What must be equal on every rank besides (the estimator's fingerprint, below
    /// 2^53); 0 where nothing is.
    pub same: u64,
}

/// The combination over all ranks.
#[derive(Clone, Debug)]
pub struct Agreed {
    /// The lowest rank that failed, and its status.
    pub first_failure: Option<(usize, mdl_status)>,
    pub backend_min: Backend,
    pub backend_max: Backend,
    pub maxima: Vec<f64>,
    /// Whether the ranks' `Proposal::same` differed.
    pub same_differs: bool,
}

/// Failure, backend (max, -min), `same` (max, -min), call (max, -min).
const HEADER: usize = 7;
/// A failure travels as -(rank * STATUS_SLOTS + status): the maximum is the lowest
/// failing rank, and its status comes along in the same value.
const STATUS_SLOTS: u64 = 16;

/// Proposals of up to this many values are encoded on the stack: the agreement that
/// carries a rank's failure (an allocation that failed, say) must not need an
/// allocation of its own, which could fail on that rank alone and leave the others
/// waiting in the reduction. Longer ones (a step's request matrix) go through
/// [`AgreementBuffers`] reserved ahead.
const ON_STACK: usize = 128;

/// The fewest values (besides the header) a loader's reserved agreement buffers hold:
/// more than the longest first agreement of a call other than a step's (the sampler's
/// `mdl_epoch_begin`: 8 settings of 6 values, 48), so that it is padded to the steps'
/// length too. Beyond 32 ranks a step proposes at most 28 values: this pads its
/// reduction from 280 to 568 bytes.
pub(crate) const CALL_AGREEMENT_MIN: usize = 64;

pub fn agree(comm: &Comm, proposal: &Proposal) -> Result<Agreed> {
    let len = HEADER + proposal.maxima.len();
    if len <= ON_STACK {
        let mut values = [0.0f64; ON_STACK];
        encode_into(comm, proposal, &mut values[..len]);
        return decode(&reduced(comm, &values[..len])?, len);
    }
    decode(&reduced(comm, &encode(comm, proposal)?)?, len)
}

/// The agreement's reduction. Its MPI errors are read as what they mean here: ranks
/// whose reductions differ in length are in different calls.
fn reduced(comm: &Comm, values: &[f64]) -> Result<Vec<f64>> {
    comm.allreduce_max(values).map_err(|err| in_different_calls(err, values.len()))
}

/// MPI reports a reduction longer on another rank as a truncation (or, with MPICH's
/// debug checks, a count mismatch): the ranks are in different calls of the library,
/// which is what to say. Before registration the agreements are not padded, and only
/// this much is known; MPI may also combine reductions of different lengths without
/// an error (see docs/hardening.md, section 5).
fn in_different_calls(err: Error, len: usize) -> Error {
    // Open MPI names the class ("MPI_ERR_TRUNCATE: message truncated"), MPICH says
    // "Message truncated, error stack: ...".
    let text = err.message.to_ascii_lowercase();
    if err.status != mdl_status::MDL_ERR_MPI || !["truncat", "mpi_err_count"].iter().any(|c| text.contains(c)) {
        return err;
    }
    Error::new(
        mdl_status::MDL_ERR_CALL_MISMATCH,
        format!(
            "this rank is in {}, and another rank in a different call of the library on this loader (their \
             agreements differ in length, {len} values here; MPI said: {}). Every rank must make the same \
             collective calls in the same order: did one rank leave its loop early, or get more batches than the others?",
            call::current().name(),
            err.message
        ),
    )
}

/// The buffers of an agreement, reserved ahead where a failure to reserve them can
/// still be agreed (registration, an epoch's start) and used again from agreement to
/// agreement: a rank that could not allocate an agreement's buffers could not take
/// part in it, and the other ranks would wait in theirs for ever.
#[derive(Default)]
pub struct AgreementBuffers {
    send: Vec<f64>,
    received: Vec<f64>,
    /// Every agreement through these buffers is padded to this length (0 for
    /// unreserved buffers: not padded).
    padded_len: usize,
}

impl AgreementBuffers {
    /// Buffers for proposals of up to `maxima` values, every one padded to that length.
    pub fn reserve(maxima: usize) -> Result<AgreementBuffers> {
        let len = HEADER + maxima;
        Ok(AgreementBuffers { send: memory::with_room(len)?, received: memory::with_room(len)?, padded_len: len })
    }

    /// Whether these are reserved buffers (which pad every agreement to one length).
    pub fn is_reserved(&self) -> bool {
        self.padded_len > 0
    }

    /// `proposal` encoded into the send buffer, padded with zeros to the reserved
    /// length, which holds it without growing. (Unreserved ones, in a call that fails
    /// on every rank anyway, say a fetch before registration, grow here.) Returns the
    /// proposal's own length.
    fn encode(&mut self, comm: &Comm, proposal: &Proposal) -> usize {
        let len = HEADER + proposal.maxima.len();
        debug_assert!(self.padded_len == 0 || len <= self.padded_len, "reserved for the longest proposal");
        self.send.clear();
        self.send.resize(len.max(self.padded_len), 0.0);
        encode_into(comm, proposal, &mut self.send[..len]);
        len
    }
}

/// [`agree`] for a proposal of any length, encoded into `buffers`.
pub fn agree_in(comm: &Comm, proposal: &Proposal, buffers: &mut AgreementBuffers) -> Result<Agreed> {
    let len = buffers.encode(comm, proposal);
    decode(&reduced(comm, &buffers.send)?, len)
}

/// An agreement started ahead of its use: the ranks go on while it completes.
pub struct AgreementUnderWay {
    reduction: Reduction,
    len: usize,
    padded_len: usize,
}

/// Start an agreement without waiting for it (collective: every rank starts its
/// agreements, and its other collectives on `comm`, in the same order). `buffers` stay
/// with it until it is finished.
pub fn start_agreement(comm: &Comm, proposal: &Proposal, mut buffers: AgreementBuffers) -> Result<AgreementUnderWay> {
    let len = buffers.encode(comm, proposal);
    buffers.received.clear();
    buffers.received.resize(buffers.send.len(), 0.0);
    let padded_len = buffers.padded_len;
    let reduction = comm.start_allreduce_max(buffers.send, buffers.received).map_err(|e| in_different_calls(e, len))?;
    Ok(AgreementUnderWay { reduction, len, padded_len })
}

impl AgreementUnderWay {
    /// The agreement, and its buffers for the next.
    pub fn finish(self) -> Result<(Agreed, AgreementBuffers)> {
        let (received, send) = self.reduction.finish().map_err(|e| in_different_calls(e, self.len))?;
        let agreed = decode(&received, self.len)?;
        Ok((agreed, AgreementBuffers { send, received, padded_len: self.padded_len }))
    }
}

fn encode(comm: &Comm, proposal: &Proposal) -> Result<Vec<f64>> {
    let mut values = memory::filled((HEADER + proposal.maxima.len()) as u64, 0.0)?;
    encode_into(comm, proposal, &mut values);
    Ok(values)
}

/// The proposal as the reduction's values: `values` holds HEADER + maxima.len().
fn encode_into(comm: &Comm, proposal: &Proposal, values: &mut [f64]) {
    values[0] = match &proposal.error {
        Some(err) => -((comm.rank() as u64 * STATUS_SLOTS + err.status as u64) as f64),
        None => f64::NEG_INFINITY,
    };
    values[1] = proposal.backend as i64 as f64;
    values[2] = -(proposal.backend as i64 as f64);
    debug_assert!(proposal.same < 1 << 53, "exact in a double");
    values[3] = proposal.same as f64;
    values[4] = -(proposal.same as f64);
    values[5] = call::current() as u64 as f64;
    values[6] = -(call::current() as u64 as f64);
    values[HEADER..].copy_from_slice(&proposal.maxima);
}

/// The combined values of a proposal of `len` values (the rest is padding).
fn decode(combined: &[f64], len: usize) -> Result<Agreed> {
    refuse_different_calls(combined)?;
    // Every rank sends a valid backend; anything else means the ranks are in different
    // calls that the call codes did not tell apart (a mismatch MPI does not detect).
    let backend = |v: f64| {
        Backend::from_code(v as i64).ok_or_else(|| {
            Error::new(mdl_status::MDL_ERR_MPI, "the ranks' agreement is garbled: are they in different calls of the library?")
        })
    };
    let first_failure = combined[0].is_finite().then(|| {
        let code = (-combined[0]) as u64;
        let status = mdl_status::from_code((code % STATUS_SLOTS) as i64).unwrap_or(mdl_status::MDL_ERR_PANIC);
        ((code / STATUS_SLOTS) as usize, status)
    });
    Ok(Agreed {
        first_failure,
        backend_max: backend(combined[1])?,
        backend_min: backend(-combined[2])?,
        same_differs: combined[3] != -combined[4],
        maxima: combined[HEADER..len].to_vec(),
    })
}

/// An error on every rank of the agreement when the ranks are in different calls,
/// naming this rank's call and another's.
fn refuse_different_calls(combined: &[f64]) -> Result<()> {
    let (highest, lowest) = (combined[5], -combined[6]);
    if highest == lowest {
        return Ok(());
    }
    let call_of = |v: f64| Call::from_code(v as u64).map_or("a call this library does not know", Call::name);
    let mine = call::current();
    let other = if mine as u64 as f64 == lowest { highest } else { lowest };
    Err(Error::new(
        mdl_status::MDL_ERR_CALL_MISMATCH,
        format!(
            "the ranks are in different calls of the library on this loader: this rank in {}, another in {}. \
             Every rank must make the same collective calls in the same order: did one rank leave its loop \
             early, or get more batches than the others? Nothing was done",
            mine.name(),
            call_of(other)
        ),
    ))
}

impl Agreed {
    /// The outcome for this rank: its own error if it failed, `MDL_ERR_REMOTE` naming
    /// the lowest failing rank and its status if only others did.
    pub fn outcome(&self, own_error: Option<Error>) -> Result<()> {
        match (own_error, self.first_failure) {
            (Some(err), _) => Err(err),
            (None, Some((rank, status))) => Err(Error::new(
                mdl_status::MDL_ERR_REMOTE,
                format!("rank {rank} failed with {} (see that rank's error); nothing was done", status.name()),
            )),
            (None, None) => Ok(()),
        }
    }

    pub fn backends_differ(&self) -> bool {
        self.backend_min != self.backend_max
    }
}

/// Agree on the outcome of a collective call's local checks alone.
pub fn agree_on_checks(comm: &Comm, checks: Result<()>) -> Result<()> {
    let error = checks.err();
    let proposal = Proposal { error: error.clone(), backend: Backend::Auto, maxima: Vec::new(), same: 0 };
    agree(comm, &proposal)?.outcome(error)
}

/// Collective over `comm`: this rank's outcome of a split of `comm` (`split`), agreed
/// over `comm` before any rank uses the new communicator, `doing` naming what the split
/// was for in the error. A rank whose split failed (after it completed elsewhere) would
/// return at once, while the ranks of its part waited for it in their first collective
/// for ever. A communicator that some rank lacks cannot be freed (that is collective):
/// it is left to the end of the job.
pub fn agree_on_split<T>(comm: &Comm, split: Result<T>, doing: &str) -> Result<T> {
    if let Err(err) = agree_on_checks(comm, outcome_of(&split)) {
        std::mem::forget(split);
        return Err(Error { message: format!("{doing}: {}", err.message), ..err });
    }
    Ok(split.expect("agreed that every rank split"))
}

/// A failure every rank answers alike, by falling back (no error reaches the caller).
pub struct Fallback {
    /// This rank's own failure, or which rank failed (the others know no more).
    pub reason: String,
    /// Whether this rank should say it as a warning: the lowest failing rank, which
    /// knows the cause, so that a job of thousands of ranks says it once.
    pub report_here: bool,
    /// The lowest failing rank's status, the same on every rank (a caller may fall back
    /// for some failures and not for others, all ranks alike).
    pub status: mdl_status,
}

impl Fallback {
    /// Log `what` happened and why: a warning on the reporting rank, info elsewhere.
    pub fn log(&self, what: &str) {
        if self.report_here {
            log::warn!("{what} ({})", self.reason)
        } else {
            log::info!("{what} ({})", self.reason)
        }
    }
}

/// Collective: agree on the outcome of local checks whose failure on any rank makes
/// every rank fall back the same way: None where every rank passed. An agreement that
/// fails itself (`MDL_TIMEOUT`) is an error: some ranks may not have taken part, and
/// falling back into the next collective would hang them.
pub fn agree_on_fallback(comm: &Comm, checks: Result<()>) -> Result<Option<Fallback>> {
    let error = checks.err();
    let proposal = Proposal { error: error.clone(), backend: Backend::Auto, maxima: Vec::new(), same: 0 };
    let agreed = agree(comm, &proposal)?;
    Ok(agreed.first_failure.map(|(first, status)| match error {
        Some(own) => Fallback { reason: own.message, report_here: first == comm.rank(), status },
        None => Fallback {
            reason: format!("rank {first} of this communicator failed with {}, and says why", status.name()),
            report_here: false,
            status,
        },
    }))
}

/// How a [`Setting`] combines over the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// Must be the same on every rank; a difference is `MDL_ERR_INVALID_ARG` everywhere.
    Identical,
    /// Every rank takes the largest value (a fact about each rank, such as whether its
    /// node is oversubscribed, that must steer all ranks the same way). Exact for
    /// values below 2^53.
    Max,
}

/// One value a collective call agrees on.
#[derive(Clone, Copy)]
pub struct Setting<'a> {
    pub name: &'a str,
    /// Compared bit for bit.
    pub value: u64,
    /// The value as a number to show (and, for [`Combine::Max`], to combine).
    pub shown: f64,
    pub combine: Combine,
    /// How to show a value in the message when ranks differ.
    pub show: fn(f64) -> String,
}

impl<'a> Setting<'a> {
    /// An integer that must be identical on every rank.
    pub fn identical(name: &'a str, value: u64) -> Setting<'a> {
        Setting { name, value, shown: value as f64, combine: Combine::Identical, show: |v| (v as u64).to_string() }
    }
    /// A number that must be identical on every rank, bit for bit.
    pub fn float(name: &'a str, value: f64) -> Setting<'a> {
        Setting { name, value: value.to_bits(), shown: value, combine: Combine::Identical, show: readable }
    }
    /// A small integer (below 2^53) whose largest value over the ranks every rank takes.
    pub fn max(name: &'a str, value: u64) -> Setting<'a> {
        Setting { combine: Combine::Max, ..Setting::identical(name, value) }
    }
    pub fn shown_as(self, show: fn(f64) -> String) -> Setting<'a> {
        Setting { show, ..self }
    }
}

/// A number as a person reads it: tiny and huge ones with an exponent (a subnormal
/// written out has over 300 digits).
fn readable(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e15).contains(&v.abs()) { format!("{v:e}") } else { v.to_string() }
}

/// Agree on local checks and on `settings` (arguments of a collective call that must
/// match, like the sampler's seed, or the configuration at init). A mismatch is
/// `MDL_ERR_INVALID_ARG` on every rank, naming each setting that differs and two of
/// its values. Returns the agreed values, in the order given: a `Setting::max`'s as
/// the double it was shown as, so exact up to 2^53.
pub fn agree_settings(comm: &Comm, checks: Result<()>, settings: &[Setting]) -> Result<Vec<u64>> {
    agree_settings_in(comm, checks, settings, None)
}

/// [`agree_settings`] as the first agreement of a call, through a loader's reserved
/// `buffers` where it has them (see the module's comment).
pub fn agree_settings_in(comm: &Comm, checks: Result<()>, settings: &[Setting], buffers: Option<&mut AgreementBuffers>) -> Result<Vec<u64>> {
    let error = checks.err();
    // Each value as two 32-bit halves (exact in f64) to detect any difference, plus the
    // number to show the smallest and largest; with negations, so that the maximum
    // also yields the minimum.
    const PER_SETTING: usize = 6;
    let mut maxima = Vec::with_capacity(settings.len() * PER_SETTING);
    for s in settings {
        let (hi, lo) = ((s.value >> 32) as f64, (s.value & 0xFFFF_FFFF) as f64);
        maxima.extend_from_slice(&[hi, lo, -hi, -lo, s.shown, -s.shown]);
    }
    let proposal = Proposal { error: error.clone(), backend: Backend::Auto, maxima, same: 0 };
    let agreed = match buffers {
        Some(buffers) => agree_in(comm, &proposal, buffers)?,
        None => agree(comm, &proposal)?,
    };
    agreed.outcome(error)?;
    let mut values = Vec::with_capacity(settings.len());
    let mut differing = Vec::new();
    for (s, m) in settings.iter().zip(agreed.maxima.chunks_exact(PER_SETTING)) {
        let (largest, smallest) = (m[4], -m[5]);
        if s.combine == Combine::Identical && (m[0] != -m[2] || m[1] != -m[3]) {
            differing.push(format!("{} differs across ranks ({} on some, {} on others)", s.name, (s.show)(smallest), (s.show)(largest)));
        }
        values.push(if s.combine == Combine::Max { largest as u64 } else { s.value });
    }
    if differing.is_empty() { Ok(values) } else { Err(Error::invalid(differing.join("; "))) }
}

/// [`agree_settings`] for values that must all be identical.
pub fn agree_identical(comm: &Comm, checks: Result<()>, settings: &[Setting]) -> Result<()> {
    agree_settings(comm, checks, settings).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn settings_read_as_numbers_a_person_can_compare() {
        assert_eq!(readable(0.05), "0.05");
        assert_eq!(readable(-0.0), "-0");
        assert_eq!(readable(30.0), "30");
        assert_eq!(readable(1e-320), "1e-320");
        assert_eq!(readable(2e20), "2e20");
    }
}
