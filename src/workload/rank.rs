//! A worker's rank among the workers of a node or a fleet. `{rank}` and `{rank_count}` in a
//! workload file stand for its numbers (so each GPU runs the same workload with its rank in
//! the names), and the `comm` pattern sizes its buffers by the rank count.
//!
//! A node sets `HEADROOM_RANK` and `HEADROOM_RANK_COUNT` for each worker; a fleet's job script
//! sets them from the scheduler's task index (`SLURM_ARRAY_TASK_ID`, `JOB_COMPLETION_INDEX`).

use anyhow::bail;

/// A worker's rank, and the number of workers.
pub const RANK_ENV: &str = "HEADROOM_RANK";
pub const RANK_COUNT_ENV: &str = "HEADROOM_RANK_COUNT";

/// This run's place among `count` workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rank {
    pub index: u32,
    pub count: u32,
}

impl Rank {
    /// A run on its own: rank 0 of 1.
    pub const SINGLE: Rank = Rank { index: 0, count: 1 };

    /// From `HEADROOM_RANK` and `HEADROOM_RANK_COUNT` (both, or neither: rank 0 of 1).
    pub fn from_env() -> anyhow::Result<Rank> {
        Rank::from_vars(
            std::env::var(RANK_ENV).ok().as_deref(),
            std::env::var(RANK_COUNT_ENV).ok().as_deref(),
        )
    }

    fn from_vars(rank: Option<&str>, count: Option<&str>) -> anyhow::Result<Rank> {
        let num = |name: &str, v: &str| -> anyhow::Result<u32> {
            v.trim()
                .parse::<u32>()
                .map_err(|_| anyhow::anyhow!("{name}={v:?}: not a whole number"))
        };
        let (index, count) = match (rank, count) {
            (None, None) => return Ok(Rank::SINGLE),
            (Some(r), Some(c)) => (num(RANK_ENV, r)?, num(RANK_COUNT_ENV, c)?),
            (Some(_), None) => bail!("{RANK_ENV} is set without {RANK_COUNT_ENV}; set both"),
            (None, Some(_)) => bail!("{RANK_COUNT_ENV} is set without {RANK_ENV}; set both"),
        };
        if index >= count {
            bail!("{RANK_ENV}={index} must be below {RANK_COUNT_ENV}={count}");
        }
        Ok(Rank { index, count })
    }

    /// The workload text with `{rank}` and `{rank_count}` replaced.
    pub fn substitute(&self, text: &str) -> String {
        text.replace("{rank}", &self.index.to_string())
            .replace("{rank_count}", &self.count.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_the_environment_both_or_neither() {
        assert_eq!(Rank::from_vars(None, None).unwrap(), Rank::SINGLE);
        assert_eq!(
            Rank::from_vars(Some("3"), Some("8")).unwrap(),
            Rank { index: 3, count: 8 }
        );
        for (r, c, want) in [
            (Some("8"), Some("8"), "must be below"),
            (
                Some("x"),
                Some("8"),
                "HEADROOM_RANK=\"x\": not a whole number",
            ),
            (Some("1"), None, "set both"),
            (None, Some("2"), "set both"),
        ] {
            let e = Rank::from_vars(r, c).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn placeholders_are_replaced() {
        let r = Rank { index: 2, count: 4 };
        assert_eq!(
            r.substitute("name = \"kv{rank}-of-{rank_count}\""),
            "name = \"kv2-of-4\""
        );
    }
}
