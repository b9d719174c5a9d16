//! `lsfs mount -o`: the comma-separated mount options, checked when the
//! command line is parsed. Later options override earlier ones, as with
//! mount(8).

use std::fmt;
use std::str::FromStr;

/// What `-o` sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountOpts {
    pub read_only: bool,
    /// The kernel's writeback cache (`writeback_cache`, the default, or
    /// `no_writeback_cache`).
    pub writeback_cache: bool,
    /// The options as given, to pass on to a background server.
    given: String,
}

impl Default for MountOpts {
    fn default() -> Self {
        MountOpts {
            read_only: false,
            writeback_cache: true,
            given: String::new(),
        }
    }
}

const KNOWN: &str = "ro, rw, writeback_cache, no_writeback_cache";

impl FromStr for MountOpts {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut o = MountOpts {
            given: s.to_string(),
            ..MountOpts::default()
        };
        for opt in s.split(',') {
            match opt {
                "ro" => o.read_only = true,
                "rw" => o.read_only = false,
                "writeback_cache" => o.writeback_cache = true,
                "no_writeback_cache" => o.writeback_cache = false,
                "" => {}
                bad => return Err(format!("unknown option '{bad}' (known: {KNOWN})")),
            }
        }
        Ok(o)
    }
}

impl fmt::Display for MountOpts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.given)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_cache_is_on_unless_turned_off() {
        let o: MountOpts = "".parse().unwrap();
        assert!(o.writeback_cache && !o.read_only);
        let o: MountOpts = "ro,no_writeback_cache".parse().unwrap();
        assert!(!o.writeback_cache && o.read_only);
        let o: MountOpts = "no_writeback_cache,writeback_cache,ro,rw".parse().unwrap();
        assert!(o.writeback_cache && !o.read_only, "later options win");
        assert_eq!(o.to_string(), "no_writeback_cache,writeback_cache,ro,rw");
        let e = "rw,nosuchthing".parse::<MountOpts>().unwrap_err();
        assert!(
            e.contains("'nosuchthing'") && e.contains("no_writeback_cache"),
            "{e}"
        );
    }
}
