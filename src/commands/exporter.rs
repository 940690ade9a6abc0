//! `headroom exporter --listen ADDR`.

use std::sync::atomic::AtomicBool;

use anyhow::Context;

use crate::cli::ExporterArgs;
use crate::exporter::ExporterOptions;

pub fn exporter(args: &ExporterArgs, interrupted: &AtomicBool) -> anyhow::Result<i32> {
    let listen = args.listen.parse().with_context(|| {
        format!(
            "--listen {:?}: expected IP:PORT (127.0.0.1:9477, [::1]:9477, 0.0.0.0:9477)",
            args.listen
        )
    })?;
    if args.process_interval == 0 {
        anyhow::bail!(
            "--process-interval must be above zero: the process list takes a global driver lock"
        );
    }
    if args.stuck_after == 0 {
        anyhow::bail!("--stuck-after must be above zero");
    }
    let opts = ExporterOptions {
        listen,
        interval_ns: args.interval,
        process_interval_ns: args.process_interval,
        process_ttl_ns: args.process_ttl,
        scraper_ttl_ns: args.scraper_ttl,
        stuck_after_ns: args.stuck_after,
        pod_resources: args.pod_resources.clone(),
    };
    crate::exporter::serve(opts, interrupted)
}
