//! `headroom merge DIR…`: the folders streamed, the CSV written as they are read.

use crate::cli::MergeArgs;
use crate::merge;
use crate::report::escape;

pub fn merge(args: &MergeArgs) -> anyhow::Result<i32> {
    if let Some(out) = &args.out {
        merge::check_new(out, args.force)?;
    }
    let mut file = args
        .out
        .as_deref()
        .map(merge::CsvFile::create)
        .transpose()?;
    let mut stdout = args.csv.then(|| {
        let mut w = csv::Writer::from_writer(crate::output::StdoutBytes);
        let _ = w.write_record(merge::header());
        w
    });
    let m = merge::stream(
        &args.dirs,
        args.skip_incomplete,
        |row| {
            if let Some(f) = &mut file {
                f.row(&row)?;
            }
            if let Some(w) = &mut stdout {
                w.write_record(&row)?;
            }
            Ok(())
        },
        |dir, why| {
            crate::errln!(
                "skipped {}: incomplete: {}",
                escape::line(&dir.display().to_string()),
                escape::line(why)
            );
        },
    )?;
    for name in &m.unfinished_nodes {
        crate::errln!(
            "note: {}: the node never finished (node.json still says running); its GPUs are judged one by one",
            escape::line(name)
        );
    }
    if let Some(f) = file {
        f.finish()?;
        crate::errln!(
            "wrote {} ({} runs{})",
            escape::line(&args.out.as_ref().expect("--out").display().to_string()),
            m.runs.len(),
            if m.skipped.is_empty() {
                String::new()
            } else {
                format!(", {} incomplete skipped", m.skipped.len())
            }
        );
    }
    if let Some(mut w) = stdout {
        w.flush()?;
    } else {
        crate::out!("{}", merge::markdown(&m))?;
    }
    Ok(0)
}
