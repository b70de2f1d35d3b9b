//! Runs one loom model, counts the executions loom explores, and checks that the model reached
//! every outcome it is meant to reach (so a model cannot pass by never racing).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc as StdArc, Mutex as StdMutex};
use std::time::Instant;

/// The outcomes a model's executions reached. Plain std bookkeeping: not explored by loom.
#[derive(Default)]
pub struct Seen {
    outcomes: StdMutex<BTreeSet<&'static str>>,
}

impl Seen {
    /// Note that this execution reached `outcome`.
    pub fn record(&self, outcome: &'static str) {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(outcome);
    }

    fn all(&self) -> BTreeSet<&'static str> {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Explore every interleaving of `model` up to the preemption bound (`LOOM_MAX_PREEMPTIONS` when
/// set, else `default_bound`), then check that every outcome in `must_see` was reached. Prints
/// the number of executions explored, the outcomes reached and the time taken.
pub fn check<F>(name: &str, default_bound: usize, must_see: &[&'static str], model: F)
where
    F: Fn(&Seen) + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(default_bound);
    }
    let executions = StdArc::new(AtomicUsize::new(0));
    let seen = StdArc::new(Seen::default());
    let (counter, seen_in_model) = (executions.clone(), seen.clone());
    let started = Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        model(&seen_in_model);
    });
    let reached = seen.all();
    println!(
        "loom model {name}: {} executions explored, preemption bound {}, {:.2?}; outcomes {:?}",
        executions.load(Ordering::Relaxed),
        builder.preemption_bound.unwrap_or(0),
        started.elapsed(),
        reached
    );
    let missing: Vec<_> = must_see.iter().filter(|o| !reached.contains(*o)).collect();
    assert!(missing.is_empty(), "model {name} never reached {missing:?}");
}
