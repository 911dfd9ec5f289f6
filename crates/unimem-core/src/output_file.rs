//! Files unimem writes (telemetry logs, traces, exports, profiles), written so that no input is
//! ever lost and no half-written file ever carries the final name: an output that is one of
//! the command's inputs (the same file, also through a link) is refused before anything is
//! opened, and the bytes go to a temporary file beside the output that is renamed into place
//! only when complete. An output dropped without [`OutputFile::commit`] (an error, a panic)
//! removes its temporary file and leaves whatever the path held before.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Whether `a` and `b` name the same existing file, through links too (same device and inode
/// on Unix; the same canonical path elsewhere). A path that does not exist is no file.
pub fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        match (a.canonicalize(), b.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
    }
}

/// Refuses `output` where it is one of `inputs`: writing it would destroy that input.
pub fn refuse_input_as_output(output: &Path, inputs: &[&Path]) -> Result<()> {
    match inputs.iter().find(|input| same_file(output, input)) {
        Some(input) => Err(Error::InvalidArgument(format!(
            "output {} is the input {}: writing it would destroy the input; name another output file",
            output.display(),
            input.display()
        ))),
        None => Ok(()),
    }
}

/// An output file being written: a temporary file beside `path`, renamed to `path` by
/// [`OutputFile::commit`].
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
}

impl OutputFile {
    /// Starts writing `path`, refused where it is one of `inputs`.
    pub fn create(path: &Path, inputs: &[&Path]) -> Result<Self> {
        refuse_input_as_output(path, inputs)?;
        static N: AtomicU64 = AtomicU64::new(0);
        let name = path
            .file_name()
            .ok_or_else(|| Error::InvalidArgument(format!("output {} names no file", path.display())))?;
        let tmp_name = format!(
            ".{}.unimem-{}-{}.tmp",
            name.to_string_lossy(),
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = path.with_file_name(tmp_name);
        let file = File::create(&tmp).map_err(|e| Error::io(path.display(), e))?;
        Ok(Self { path: path.to_path_buf(), tmp, out: Some(BufWriter::with_capacity(1 << 16, file)) })
    }

    /// A second handle on the file being written, for a writer that must be owned elsewhere
    /// (a telemetry sink): flush what it writes before [`OutputFile::commit`].
    pub fn handle(&self) -> Result<File> {
        let out = self.out.as_ref().expect("not committed");
        out.get_ref().try_clone().map_err(|e| Error::io(self.path.display(), e))
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes the bytes to disk and renames the file into place. On an error the temporary
    /// file is removed and the path keeps what it held.
    pub fn commit(mut self) -> Result<()> {
        let what = self.path.display().to_string();
        let out = self.out.take().expect("an output is committed once");
        let done = out
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|file| file.sync_all())
            .and_then(|()| std::fs::rename(&self.tmp, &self.path));
        if done.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        done.map_err(|e| Error::io(what, e))
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.as_mut().expect("not committed").write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.as_mut().expect("not committed").flush()
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("unimem-out-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_output_appears_only_when_committed() {
        let d = dir("commit");
        let path = d.join("log.jsonl");
        std::fs::write(&path, "old").unwrap();
        let mut out = OutputFile::create(&path, &[]).unwrap();
        out.write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old", "nothing replaced before the commit");
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let mut abandoned = OutputFile::create(&path, &[]).unwrap();
        abandoned.write_all(b"half").unwrap();
        drop(abandoned);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new", "an abandoned output leaves the old file");
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 1, "no temporary file left behind: {left:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_input_is_never_an_output_also_through_links() {
        let d = dir("input");
        let input = d.join("trace.jsonl.gz");
        std::fs::write(&input, "trace").unwrap();
        let e = OutputFile::create(&input, &[&input]).unwrap_err().to_string();
        assert!(e.contains("would destroy the input"), "{e}");
        #[cfg(unix)]
        {
            let link = d.join("link.gz");
            std::os::unix::fs::symlink(&input, &link).unwrap();
            assert!(OutputFile::create(&link, &[&input]).is_err(), "a symbolic link to the input");
            let hard = d.join("hard.gz");
            std::fs::hard_link(&input, &hard).unwrap();
            assert!(OutputFile::create(&hard, &[&input]).is_err(), "a hard link to the input");
        }
        let relative = d.join(".").join("trace.jsonl.gz");
        assert!(OutputFile::create(&relative, &[&input]).is_err(), "another spelling of the input");
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "trace");
        assert!(OutputFile::create(&d.join("other"), &[&input]).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
