//! The engine's loop on a caller's context, synchronously: what
//! [`generate`](crate::generate) and [`chat`](crate::chat) run.

use glint_tokenizer::Tokenizer;

use super::sched::{Job, Scheduler};
use super::{EventSink, Request};
use crate::{Context, Error};

/// Run `jobs` to completion on `ctx`, in slots over `seqs` (each a sequence
/// id and the tokens its cells already hold at positions `0..`), with whole
/// `n_batch` prompt chunks (nobody else waits for a step). Returns each
/// slot's sequence and the tokens its cells hold afterwards (empty where
/// they are not a plain prefix, after self-extend), or the first error
/// (its request got [`super::Event::Failed`] too).
///
/// The caller checks the requests ([`Request::check`]) and that `seqs`
/// holds what it says.
pub(crate) fn run_local<'a>(
    ctx: &mut Context,
    tok: &'a Tokenizer,
    seqs: Vec<(i32, Vec<u32>)>,
    jobs: Vec<(Request, Box<dyn EventSink + 'a>)>,
) -> Result<Vec<(i32, Vec<u32>)>, Error> {
    let cap = ctx.params().n_batch as usize;
    let mut sched = Scheduler::new(tok, seqs, cap, None, 0);
    for (req, sink) in jobs {
        sched.push(Job { req, sink });
    }
    while sched.is_busy() {
        sched.step(ctx);
        if let Some(e) = sched.error.take() {
            return Err(e);
        }
    }
    Ok(sched.caches())
}
