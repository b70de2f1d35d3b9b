//! Runs one loom model and reports how many executions loom explored.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Explore every interleaving of `model` up to the preemption bound: `LOOM_MAX_PREEMPTIONS` when
/// set, else `default_bound`. Prints the number of executions explored and the time taken.
pub fn check<F>(name: &str, default_bound: usize, model: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(default_bound);
    }
    // Plain std counter: it counts executions, it is not part of what loom explores.
    let executions = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = executions.clone();
    let started = Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        model();
    });
    println!(
        "loom model {name}: {} executions explored, preemption bound {}, {:.2?}",
        executions.load(Ordering::Relaxed),
        builder.preemption_bound.unwrap_or(0),
        started.elapsed()
    );
}
