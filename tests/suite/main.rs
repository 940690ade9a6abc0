//! headroom's integration tests, one module per area, in one test binary: the binary links
//! the crate once and its tests share both cores. Apart from it: `tests/bounds.rs` (it times
//! Ctrl-C on runs near the step bound), `tests/soak.rs` (it measures its children's peak RSS
//! through `wait4`, which counts the parent's resident memory at the spawn: the parent must
//! stay small) and `tests/fuzz_workload` (it installs its own global allocator).
//!
//! Run one area with its module name as the filter: `cargo test --test suite plan_sim::`.

#[path = "../common/mod.rs"]
mod common;

mod alloc_conformance;
mod caching_props;
mod calibrate_crosscheck;
mod ci_examples;
mod csv_columns;
mod diff;
mod docs;
mod driver_floor;
mod driver_history;
mod engine_logs;
mod explain;
mod explain_inputs;
mod explain_logs;
mod exporter;
mod fake_gpu;
mod files_people_open;
mod fit;
mod fleet;
mod fleet_image;
mod fleet_reports;
mod fleet_text;
mod gpu_check;
mod gpu_check_cards;
mod graphs_sim;
mod hold;
mod hostile;
mod kernels_sim;
mod limits;
mod mig;
mod model_plans;
mod module_graph;
mod node;
mod oom_corpus;
mod oom_reports;
mod oom_shapes;
mod oom_sim;
mod outputs;
mod pipes;
mod plan_sim;
mod plan_sweep;
mod plot;
mod real_driver;
mod replay;
mod reports;
mod rules;
mod run_records;
mod run_sim;
mod schema;
mod shipped;
mod slurm;
mod snapshot_fidelity;
mod snapshot_fuzz;
mod snapshot_pickler;
mod snapshot_unknowns;
mod torch_import;
mod watch_fake;
mod watch_orphans;
mod watch_sim;
mod watch_torch;
mod watch_watchdog;
mod watchdog;
mod wheel;
