//! A stored run named on the command line: its id, or `last` / `last~N`
//! (the newest stored run, N runs before it), so that a sequence of commands
//! (the README's, a CI script's) can compare the runs it just made without
//! knowing the ids a store it did not create will hand out.

use std::str::FromStr;

use crate::store::{RunFilter, Store};

use super::CliError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunRef {
    Id(i64),
    /// `last~N`: N runs before the newest (by id: the order they were stored).
    Last(usize),
}

impl FromStr for RunRef {
    type Err = String;

    fn from_str(s: &str) -> Result<RunRef, String> {
        let bad = || format!("`{s}` is not a run: give its id (see `mtlab runs`), `last` for the newest stored run, or `last~N` for N runs before it");
        if let Ok(id) = s.parse::<i64>() {
            return if id > 0 { Ok(RunRef::Id(id)) } else { Err(bad()) };
        }
        match s.strip_prefix("last") {
            Some("") => Ok(RunRef::Last(0)),
            Some(rest) => rest.strip_prefix('~').and_then(|n| n.parse().ok()).map(RunRef::Last).ok_or_else(bad),
            None => Err(bad()),
        }
    }
}

impl RunRef {
    /// The id this names in `store`.
    pub fn resolve(self, store: &Store) -> Result<i64, CliError> {
        let back = match self {
            RunRef::Id(id) => return Ok(id),
            RunRef::Last(back) => back,
        };
        let mut ids: Vec<i64> = store.list(&RunFilter::default())?.into_iter().map(|r| r.id).collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.get(back).copied().ok_or_else(|| {
            CliError::Other(format!(
                "`last~{back}` names the run {back} before the newest, but the results store {} holds {} run{}; run `mtlab runs` to list them",
                store.path().display(),
                ids.len(),
                if ids.len() == 1 { "" } else { "s" }
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::RunRef;

    #[test]
    fn ids_last_and_runs_before_it() {
        assert_eq!("7".parse(), Ok(RunRef::Id(7)));
        assert_eq!("last".parse(), Ok(RunRef::Last(0)));
        assert_eq!("last~2".parse(), Ok(RunRef::Last(2)));
        for bad in ["0", "-1", "lastly", "last~", "last~x", "first"] {
            let e = bad.parse::<RunRef>().unwrap_err();
            assert!(e.contains(&format!("`{bad}`")) && e.contains("last~N"), "{e}");
        }
    }
}
