//! Fuzzing the workload parser and expander: whole generated workload files and mutated
//! shipped ones, each loaded as `headroom run` loads a workload. Every case must give a
//! workload or an error that names the file; a panic, a case over 10 s of CPU time (30 s in a
//! debug build) or unfinished after 300 s of wall time (900 s), heap over 1 GiB or resident
//! memory over 1.25 GiB fails the run.
//!
//! `cargo test --test fuzz_workload` runs `SMOKE_CASES` cases from a fixed seed (CI does, as
//! part of `cargo test --all-targets`). For a longer run:
//!
//! ```sh
//! HEADROOM_FUZZ_CASES=100000 cargo test --release --test fuzz_workload -- --nocapture
//! ```
//!
//! `HEADROOM_FUZZ_SEED=N` draws other cases; `HEADROOM_FUZZ_COMMANDS=N` weighs the cases
//! that run the binary (`commands`) N against the others' 45 (1 by default); `HEADROOM_FUZZ_REPLAY=FILE` loads one file alone. A failure prints the case, shrunk, and saves its
//! seed in `tests/fuzz_workload/main.regressions`, replayed first by every later run; a hang
//! or runaway memory stops the process and prints the case (no shrinking then).

mod commands;
mod episodes;
mod generate;
mod kinds;
mod measured;
mod meter;
mod mutate;
mod oracle;
mod pickles;
mod regressions;
mod values;
mod watchdog;

use std::cell::RefCell;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed, TestCaseError, TestRunner};

use headroom::workload::Rank;
use oracle::{Case, Outcome, Stage};

#[global_allocator]
static METER: meter::Meter = meter::Meter;

/// Cases of the CI smoke run (about 15 s in a debug build on two cores; a few of them expand to
/// the million-action bound, which is what takes the time).
const SMOKE_CASES: u32 = 500;
/// The smoke run's seed: the same cases every time.
const SMOKE_SEED: u64 = 1411;

const MIB: u64 = 1 << 20;

/// A long run prints its count every this many cases.
const PROGRESS_EVERY: u64 = 1_000;

fn case() -> impl Strategy<Value = Case> {
    let text = prop_oneof![
        3 => generate::episodic(),
        2 => generate::workload(false),
        2 => generate::workload(true),
        3 => mutate::shipped(),
        1 => (generate::workload(false), mutate::mutations()).prop_map(|(t, m)| mutate::apply(&t, &m)),
    ];
    // tiny-4g, h100-80g and h200's CUDA-visible totals, a small and a huge device.
    let total = prop::sample::select(
        &[
            4096 * MIB,
            4096 * MIB,
            81_089 * MIB,
            143_156 * MIB,
            256 * MIB,
            1 << 50,
        ][..],
    );
    let rank = prop_oneof![
        6 => Just(Rank::SINGLE),
        2 => (1..=8u32).prop_flat_map(|count| (0..count, Just(count))).prop_map(|(index, count)| Rank { index, count }),
        1 => Just(Rank { index: u32::MAX - 1, count: u32::MAX }),
    ];
    (text, total, rank).prop_map(|(text, total_bytes, rank)| Case {
        text,
        total_bytes,
        rank,
    })
}

/// A workload to load, or one of the other kinds (`kinds`).
#[derive(Debug, Clone)]
enum AnyCase {
    Load(Case),
    Extra(kinds::Extra),
}

/// One case in `load_weight + 6` is a workload loaded; of the rest, three are texts explained,
/// one a run on the simulator, one a hostile pickle for the snapshot reader and one a run of
/// the binary (`commands`). The smoke run keeps to a few of the slower kinds (so that `cargo
/// test` takes about what it took before they were added); a long run mixes them in at one in
/// eight. `commands_weight` (`HEADROOM_FUZZ_COMMANDS`) weighs the binary's runs instead of 1.
fn any_case(load_weight: u32, commands_weight: u32) -> impl Strategy<Value = AnyCase> {
    prop_oneof![
        load_weight => case().prop_map(AnyCase::Load),
        3 => kinds::explain_case().prop_map(AnyCase::Extra),
        1 => kinds::run_case().prop_map(AnyCase::Extra),
        1 => prop_oneof![kinds::pickle_case(), pickles::snapshot_case()].prop_map(AnyCase::Extra),
        commands_weight => kinds::command_case().prop_map(AnyCase::Extra),
    ]
}

fn env_number<T: std::str::FromStr>(key: &str) -> Option<T> {
    let v = std::env::var(key).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v:?} is not a number")),
    )
}

/// What a run saw, for its closing line.
#[derive(Default)]
struct Tally {
    cases: u64,
    accepted: u64,
    /// Loaded workloads that the one-pass reader read.
    one_pass: u64,
    /// Refused while parsing, by the check, for the device.
    refused: [u64; 3],
    actions: u64,
    /// The most CPU time one case took, and the most wall time.
    slowest: Duration,
    slowest_wall: Duration,
    most_heap: usize,
    /// Texts explained, and long-step runs on the simulator.
    explained: u64,
    runs: u64,
    /// Hostile pickles read by the snapshot reader (their time counts with the runs').
    pickles: u64,
    /// Cases that run the binary: hung NVML in a watch, late signals, double-forked jobs,
    /// gigabyte lines (their time counts with the runs').
    commands: u64,
    /// Time in each kind of case: loads, explains, runs.
    took: [Duration; 3],
}

impl Tally {
    fn add(&mut self, o: &Outcome) {
        self.cases += 1;
        match o.stage {
            Stage::Parse => self.refused[0] += 1,
            Stage::Check => self.refused[1] += 1,
            Stage::Device => self.refused[2] += 1,
            Stage::Loaded => {}
        }
        if let Some(n) = o.actions {
            self.accepted += 1;
            self.one_pass += u64::from(o.one_pass);
            self.actions += n as u64;
        }
        self.slowest = self.slowest.max(o.cpu);
        self.slowest_wall = self.slowest_wall.max(o.elapsed);
        self.took[0] += o.cpu;
        self.most_heap = self.most_heap.max(o.heap_bytes);
    }
}

/// `HEADROOM_FUZZ_REPLAY=FILE`: loads FILE alone, through the same checks, and says what it did
/// (how a stuck case, saved by the watchdog, is looked at once fixed).
fn replay(path: &str) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    for total_bytes in [4096 * MIB, 143_156 * MIB] {
        let case = Case {
            text: text.clone(),
            total_bytes,
            rank: Rank::SINGLE,
        };
        match oracle::run(&case) {
            Ok(o) => println!("{path} on {total_bytes} bytes: {o:?}"),
            Err(why) => panic!("{path} on {total_bytes} bytes: {why}"),
        }
    }
}

#[test]
fn workload_files_load_or_are_refused_within_time_and_memory() {
    oracle::quiet_panics();
    if let Ok(path) = std::env::var("HEADROOM_FUZZ_REPLAY") {
        return replay(&path);
    }
    let long_run: Option<u32> = env_number("HEADROOM_FUZZ_CASES");
    let cases = long_run.unwrap_or(SMOKE_CASES);
    let load_weight = if long_run.is_some() { 40 } else { 250 };
    let seed = env_number("HEADROOM_FUZZ_SEED").unwrap_or(SMOKE_SEED);
    let mut runner = TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("regressions"))),
        max_shrink_iters: 10_000,
        ..Config::default()
    });
    let tally = RefCell::new(Tally::default());
    let start = Instant::now();
    let commands_weight = env_number("HEADROOM_FUZZ_COMMANDS").unwrap_or(1);
    let result = runner.run(&any_case(load_weight, commands_weight), |c| {
        // A long run says how far it is, so that one stopped early still has its count.
        let done = tally.borrow().cases;
        if long_run.is_some() && done > 0 && done % PROGRESS_EVERY == 0 {
            let t = tally.borrow();
            println!(
                "fuzz_workload: {done} cases passed in {:.0} s ({} runs of the binary, {} long-step runs, {} pickles)",
                start.elapsed().as_secs_f64(),
                t.commands,
                t.runs,
                t.pickles
            );
        }
        let c = match c {
            AnyCase::Load(c) => c,
            AnyCase::Extra(e) => {
                let (wall, took) =
                    oracle::guarded(e.text(), || kinds::check(&e)).map_err(|why| {
                        TestCaseError::fail(format!("{why}\n--- the case:\n{e:?}\n---"))
                    })?;
                let mut t = tally.borrow_mut();
                t.cases += 1;
                t.slowest = t.slowest.max(took);
                t.slowest_wall = t.slowest_wall.max(wall);
                match e {
                    kinds::Extra::Explain(_) => {
                        t.explained += 1;
                        t.took[1] += took;
                    }
                    kinds::Extra::Run { .. } => {
                        t.runs += 1;
                        t.took[2] += took;
                    }
                    kinds::Extra::Pickle { .. } => {
                        t.pickles += 1;
                        t.took[2] += took;
                    }
                    kinds::Extra::Command { .. } => {
                        t.commands += 1;
                        t.took[2] += took;
                    }
                }
                return Ok(());
            }
        };
        let o = oracle::run(&c).map_err(|why| {
            TestCaseError::fail(format!(
                "{why}\n--- the case (device total {} bytes, rank {} of {}):\n{}\n---",
                c.total_bytes, c.rank.index, c.rank.count, c.text
            ))
        })?;
        tally.borrow_mut().add(&o);
        Ok(())
    });
    let t = tally.into_inner();
    let peak_rss = meter::peak_rss_bytes();
    println!(
        "fuzz_workload: {} cases (seed {seed}) in {:.1} s: {} texts explained, {} long-step runs with signals, {} hostile pickles, {} runs of the binary (hung NVML, late signals, double forks, gigabyte lines); {} loaded ({} actions; {} read in one pass), refused {} parsing, {} checking, {} for the device; \
         slowest case {:.0} ms of CPU ({:.0} ms the longest in wall time), most heap in one case {} MiB, peak RSS {} MiB; CPU time in loads {:.1} s, explains {:.1} s, runs {:.1} s",
        t.cases,
        start.elapsed().as_secs_f64(),
        t.explained,
        t.runs,
        t.pickles,
        t.commands,
        t.accepted,
        t.actions,
        t.one_pass,
        t.refused[0],
        t.refused[1],
        t.refused[2],
        t.slowest.as_secs_f64() * 1e3,
        t.slowest_wall.as_secs_f64() * 1e3,
        t.most_heap >> 20,
        peak_rss >> 20,
        t.took[0].as_secs_f64(),
        t.took[1].as_secs_f64(),
        t.took[2].as_secs_f64(),
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        t.one_pass > 0 || t.accepted == 0,
        "none of the {} loaded workloads was read in one pass",
        t.accepted
    );
    assert!(
        peak_rss <= watchdog::RSS_CAP_BYTES,
        "peak RSS {} MiB is over the {} MiB bound",
        peak_rss >> 20,
        watchdog::RSS_CAP_BYTES >> 20
    );
}
