//! Children's output: every line to the launcher's console prefixed with its rank, byte for
//! byte (output that is not UTF-8 passes through unchanged), and with `--log-dir` also to a
//! file per rank and stream, unprefixed.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// Which of the launcher's streams a child's stream goes to.
#[derive(Clone, Copy)]
pub enum Stream {
    /// stdout (`stdout.log`).
    Out,
    /// stderr (`stderr.log`).
    Err,
}

/// Copies `src` to the console line by line, each prefixed `[rank r] `, and to `log`.
pub fn pump(
    rank: usize,
    src: impl std::io::Read + Send + 'static,
    to: Stream,
    mut log: Option<std::fs::File>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let prefix = format!("[rank {rank}] ");
        let mut src = BufReader::new(src);
        let mut line = Vec::new();
        loop {
            line.clear();
            match src.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if let Some(f) = log.as_mut() {
                let _ = f.write_all(&line);
            }
            // A last line without its newline gets one, so ranks' lines never run together.
            let end: &[u8] = if line.ends_with(b"\n") { b"" } else { b"\n" };
            let _ = match to {
                Stream::Out => write_line(&mut std::io::stdout().lock(), &prefix, &line, end),
                Stream::Err => write_line(&mut std::io::stderr().lock(), &prefix, &line, end),
            };
        }
    })
}

fn write_line(w: &mut impl Write, prefix: &str, line: &[u8], end: &[u8]) -> std::io::Result<()> {
    w.write_all(prefix.as_bytes())?;
    w.write_all(line)?;
    w.write_all(end)?;
    w.flush()
}

/// The log files of `rank` in attempt `attempt`, as torchrun lays them out:
/// `DIR/attempt_K/RANK/{stdout,stderr}.log`.
///
/// # Errors
/// Why the directory or a file cannot be created.
pub fn log_files(
    dir: &Path,
    attempt: usize,
    rank: usize,
) -> Result<(std::fs::File, std::fs::File), String> {
    let d = dir
        .join(format!("attempt_{attempt}"))
        .join(rank.to_string());
    std::fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    let open = |name: &str| {
        let p = d.join(name);
        std::fs::File::create(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))
    };
    Ok((open("stdout.log")?, open("stderr.log")?))
}
