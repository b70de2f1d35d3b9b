//! A worker thread's loop over handed-off jobs (hipobj-server's RDMA workers): each job carries
//! the admission place it holds; the worker runs it, frees the place, and only then sends the
//! answer, so a requester that sends its next request as soon as it has the answer always finds
//! its place free again. The loop ends when every sender of the job channel is gone.

use crate::fault;
use crate::sync::channel::Receiver;

/// One job on its way to a worker.
#[derive(Debug)]
pub struct Handoff<W, P> {
    /// What to run (with where its answer goes).
    pub work: W,
    /// The admission place the job holds; dropping it frees the place.
    pub place: P,
}

/// Run the jobs of `jobs` in turn until the channel closes. `run` runs one job (containing its
/// panics) and returns what sends its answer; the place is freed between the two.
pub fn serve<W, P, F, A>(jobs: &Receiver<Handoff<W, P>>, mut run: F)
where
    F: FnMut(W) -> A,
    A: FnOnce(),
{
    while let Ok(Handoff { work, place }) = jobs.recv() {
        let answer = run(work);
        if fault::broken("place-freed-before-answer") {
            answer();
            drop(place);
            continue;
        }
        drop(place);
        answer();
    }
}
