//! Reading bytes that may be gzip-compressed: traces and telemetry logs are kept either way.

use std::io::{self, BufRead, BufReader, Read};

use flate2::bufread::MultiGzDecoder;

/// The bytes of a reader, decompressed when they start with the gzip magic (`1f 8b`), as they
/// are otherwise.
pub enum Decompressed<R: BufRead> {
    /// Not compressed.
    Plain(R),
    /// gzip (several members read as one stream, as `gzip` concatenates them).
    Gzip(BufReader<MultiGzDecoder<R>>),
}

impl<R: BufRead> Decompressed<R> {
    /// Looks at the first bytes of `raw` (without consuming them) to tell which it is.
    pub fn new(mut raw: R) -> io::Result<Self> {
        let magic = raw.fill_buf()?;
        Ok(if magic.len() >= 2 && magic[..2] == [0x1f, 0x8b] {
            Self::Gzip(BufReader::with_capacity(1 << 16, MultiGzDecoder::new(raw)))
        } else {
            Self::Plain(raw)
        })
    }
}

impl<R: BufRead> Read for Decompressed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(r) => r.read(buf),
            Self::Gzip(r) => r.read(buf),
        }
    }
}

impl<R: BufRead> BufRead for Decompressed<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self {
            Self::Plain(r) => r.fill_buf(),
            Self::Gzip(r) => r.fill_buf(),
        }
    }

    fn consume(&mut self, amt: usize) {
        match self {
            Self::Plain(r) => r.consume(amt),
            Self::Gzip(r) => r.consume(amt),
        }
    }
}
