//! The kernels' PTX kept on disk between runs. NVRTC compiles the backend's source in about
//! 2.6 s, in every process that opens the backend (each rank of a job, each run), for output
//! that depends only on the source, the target architecture and the NVRTC release. So the PTX
//! is stored under a name derived from those three, and a later process that finds it skips
//! NVRTC (the driver keeps its own cache of the machine code it builds from PTX).
//!
//! The directory is `GFLOW_CACHE_DIR` if set (empty: no cache), else `$XDG_CACHE_HOME/gflow`,
//! `~/.cache/gflow` or, on Windows, `%LOCALAPPDATA%\gflow`. A file is written under a
//! temporary name and renamed, so ranks compiling at once never read half a file; one that
//! fails the caller's check (truncated, edited) is compiled again and replaced. The cache only
//! saves time: a directory that cannot be read or written is the same as no cache.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The cache directory (see the module docs), `None` when caching is off or no home is known.
pub(crate) fn directory() -> Option<PathBuf> {
    directory_from(|name| std::env::var_os(name))
}

/// [`directory`] from the environment variables `var` gives.
fn directory_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = var("GFLOW_CACHE_DIR") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(xdg) = set("XDG_CACHE_HOME") {
        return Some(PathBuf::from(xdg).join("gflow"));
    }
    if cfg!(windows) {
        return set("LOCALAPPDATA").map(|d| PathBuf::from(d).join("gflow"));
    }
    set("HOME").map(|h| PathBuf::from(h).join(".cache").join("gflow"))
}

/// The file in `dir` for output that depends on `key` alone: `{stem}-{sha256 of key}.ptx`.
pub(crate) fn file(dir: &Path, stem: &str, key: &[&str]) -> PathBuf {
    let mut h = Sha256::new();
    for part in key {
        // each part's length first, so that moving text between parts changes the name
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{stem}-{hex}.ptx"))
}

/// The text stored at `path` when it passes `valid`, else `compile`'s, stored there for the
/// next process (without `path`, `compile`'s alone). `compile`'s errors are returned.
pub(crate) fn cached<E>(
    path: Option<&Path>,
    valid: impl Fn(&str) -> bool,
    compile: impl FnOnce() -> Result<String, E>,
) -> Result<String, E> {
    let Some(path) = path else {
        return compile();
    };
    if let Ok(text) = std::fs::read_to_string(path)
        && valid(&text)
    {
        return Ok(text);
    }
    let text = compile()?;
    if let Err(e) = store(path, &text) {
        tracing::debug!("kernel cache: {} not written: {e}", path.display());
    }
    Ok(text)
}

/// Writes `text` to `path` through a temporary file in the same directory, renamed over it.
fn store(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gflow-ptx-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_second_process_reads_what_the_first_compiled() {
        let dir = scratch("hit");
        let path = file(&dir, "kernels", &["source", "compute_80", "12.4"]);
        let runs = Cell::new(0);
        let compile = || {
            runs.set(runs.get() + 1);
            Ok::<_, String>(".entry k(".to_string())
        };
        let valid = |t: &str| t.contains(".entry k(");
        assert_eq!(cached(Some(&path), valid, compile).unwrap(), ".entry k(");
        assert_eq!(cached(Some(&path), valid, compile).unwrap(), ".entry k(");
        assert_eq!(runs.get(), 1, "the second call compiled again");
        // nothing but the file itself is left in the directory
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(names.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_fails_the_check_is_compiled_again_and_replaced() {
        let dir = scratch("stale");
        let path = file(&dir, "kernels", &["source", "compute_80", "12.4"]);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&path, ".entry k").unwrap(); // truncated
        let got = cached(
            Some(&path),
            |t| t.contains(".entry k("),
            || Ok::<_, String>(".entry k(".to_string()),
        );
        assert_eq!(got.unwrap(), ".entry k(");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), ".entry k(");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_pass_through_and_an_unwritable_cache_only_costs_time() {
        let dir = scratch("errors");
        let path = file(&dir, "kernels", &["x"]);
        let err = cached(Some(&path), |_| true, || Err::<String, _>("no NVRTC"));
        assert_eq!(err, Err("no NVRTC"));
        assert!(!path.exists(), "a failed compile stored something");
        // a cache "directory" that is a file: the text still comes back
        std::fs::write(std::env::temp_dir().join("gflow-ptx-file"), "").unwrap();
        let blocked = file(&std::env::temp_dir().join("gflow-ptx-file"), "k", &["x"]);
        let got = cached(Some(&blocked), |_| true, || Ok::<_, String>("ptx".into()));
        assert_eq!(got.unwrap(), "ptx");
    }

    #[test]
    fn the_directory_follows_the_environment() {
        fn env<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| OsString::from(v))
            }
        }
        let home = [("HOME", "/home/u")];
        let xdg = [("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")];
        let ours = [("XDG_CACHE_HOME", "/x"), ("GFLOW_CACHE_DIR", "/g")];
        let off = [("HOME", "/home/u"), ("GFLOW_CACHE_DIR", "")];
        if !cfg!(windows) {
            assert_eq!(
                directory_from(env(&home)),
                Some(PathBuf::from("/home/u/.cache/gflow"))
            );
        }
        assert_eq!(directory_from(env(&xdg)), Some(PathBuf::from("/x/gflow")));
        assert_eq!(directory_from(env(&ours)), Some(PathBuf::from("/g")));
        assert_eq!(directory_from(env(&off)), None);
        assert_eq!(directory_from(env(&[])), None);
    }

    #[test]
    fn names_change_with_every_part_of_the_key() {
        let dir = Path::new("/c");
        let a = file(dir, "k", &["src", "compute_80", "12.4"]);
        assert_eq!(a, file(dir, "k", &["src", "compute_80", "12.4"]));
        assert_ne!(a, file(dir, "k", &["src!", "compute_80", "12.4"]));
        assert_ne!(a, file(dir, "k", &["src", "compute_90", "12.4"]));
        assert_ne!(a, file(dir, "k", &["src", "compute_80", "12.8"]));
        assert_ne!(a, file(dir, "k", &["srccompute_80", "", "12.4"]));
    }
}
