//! The bytes of one side (host or device) of a region, page by page and sparse: replaying a
//! trace of many gigabytes keeps no data, while tests that write data get it back exactly.
//! A page that is absent reads as zeros (managed memory is zero-filled on first touch).

use rustc_hash::FxHashMap as HashMap;

use crate::seam::PAGE_SIZE;

/// Sparse page contents of one side of a region.
#[derive(Debug, Default)]
pub struct PageStore {
    pages: HashMap<usize, Box<[u8]>>,
}

impl PageStore {
    /// Moves page `p` out (for a migration: the data lives on exactly one side afterwards).
    pub fn take(&mut self, p: usize) -> Option<Box<[u8]>> {
        self.pages.remove(&p)
    }

    /// A copy of page `p` (for a read-mostly duplicate).
    pub fn copy(&self, p: usize) -> Option<Box<[u8]>> {
        self.pages.get(&p).cloned()
    }

    /// Stores page `p`'s contents (None = zeros).
    pub fn put(&mut self, p: usize, data: Option<Box<[u8]>>) {
        match data {
            Some(d) => {
                self.pages.insert(p, d);
            }
            None => {
                self.pages.remove(&p);
            }
        }
    }

    /// Drops page `p`'s contents.
    pub fn drop_page(&mut self, p: usize) {
        self.pages.remove(&p);
    }

    /// True when no page holds data (the common case in trace replay: nothing to move).
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Copies bytes starting at `offset` into `buf`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (p, within) = ((pos / PAGE_SIZE) as usize, (pos % PAGE_SIZE) as usize);
            let n = (PAGE_SIZE as usize - within).min(buf.len() - done);
            match self.pages.get(&p) {
                Some(page) => buf[done..done + n].copy_from_slice(&page[within..within + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
    }

    /// Writes `data` starting at `offset`.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let (p, within) = ((pos / PAGE_SIZE) as usize, (pos % PAGE_SIZE) as usize);
            let n = (PAGE_SIZE as usize - within).min(data.len() - done);
            let page = self.pages.entry(p).or_insert_with(|| vec![0; PAGE_SIZE as usize].into_boxed_slice());
            page[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_writes_across_pages_and_zeros_elsewhere() {
        let mut s = PageStore::default();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        s.write(4000, &data);
        let mut back = vec![0xffu8; 10_000];
        s.read(4000, &mut back);
        assert_eq!(back, data);
        let mut zeros = vec![0xffu8; 100];
        s.read(20_000, &mut zeros);
        assert!(zeros.iter().all(|&b| b == 0));
        let moved = s.take(1);
        assert!(moved.is_some());
        s.read(4096, &mut back[..10]);
        assert_eq!(&back[..10], &[0; 10], "a page moved away reads as absent here");
    }
}
