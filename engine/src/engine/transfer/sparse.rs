//! Writing downloaded bytes so that zeros become holes: a sparse remote file (a 1 TiB disk
//! image that holds a few MiB) stays sparse here instead of filling the local disk. The bytes
//! still cross the link (SFTP has no way to ask where the holes are); only the local disk is
//! spared. Blocks of [`BLOCK`] zero bytes are skipped with a seek; `finish` sets the final
//! length, so a file that ends in a hole has its full size.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};

/// The hole granularity: the usual file system block.
pub const BLOCK: usize = 4096;

/// A new, empty file being written from its start.
pub struct SparseWriter {
    file: File,
    /// Bytes accepted so far (the file's final length).
    len: u64,
    /// Zero bytes accepted but not yet skipped over.
    hole: u64,
}

impl SparseWriter {
    pub fn new(file: File) -> SparseWriter {
        SparseWriter {
            file,
            len: 0,
            hole: 0,
        }
    }

    /// Append `buf`: its all-zero blocks are skipped, the rest written.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut data_start = 0;
        for (i, block) in buf.chunks(BLOCK).enumerate() {
            if block.len() == BLOCK && is_zero(block) {
                let at = i * BLOCK;
                self.flush_data(&buf[data_start..at])?;
                self.hole += BLOCK as u64;
                data_start = at + BLOCK;
            }
        }
        self.flush_data(&buf[data_start..])?;
        self.len += buf.len() as u64;
        Ok(())
    }

    /// Set the final length (a trailing hole included) and return the file.
    pub fn finish(self) -> io::Result<File> {
        self.file.set_len(self.len)?;
        Ok(self.file)
    }

    fn flush_data(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.hole > 0 {
            let skip = i64::try_from(self.hole).map_err(io::Error::other)?;
            self.file.seek(SeekFrom::Current(skip))?;
            self.hole = 0;
        }
        self.file.write_all(data)
    }
}

/// Word by word: the usual data block is rejected on its first word.
fn is_zero(block: &[u8]) -> bool {
    let words = block.chunks_exact(8);
    let tail = words.remainder();
    words
        .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or([1; 8])))
        .all(|w| w == 0)
        && tail.iter().all(|b| *b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn write_all(parts: &[&[u8]]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut w = SparseWriter::new(File::create(&path).unwrap());
        for p in parts {
            w.write(p).unwrap();
        }
        w.finish().unwrap();
        (dir, path)
    }

    #[test]
    fn zeros_become_holes_and_the_bytes_stay_the_same() {
        let mut data = vec![0u8; 8 << 20];
        data[3 << 20..(3 << 20) + 5].copy_from_slice(b"hello");
        let last = data.len() - 1;
        data[last] = 7;
        let chunks: Vec<&[u8]> = data.chunks(1 << 20).collect();
        let (_dir, path) = write_all(&chunks);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let allocated = std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(allocated < 1 << 20, "{allocated} bytes allocated for 8 MiB");
    }

    #[test]
    fn a_trailing_hole_keeps_the_length_and_odd_sizes_are_exact() {
        let mut data = vec![1u8; 5000];
        data.extend(vec![0u8; 3 * BLOCK + 17]);
        let (_dir, path) = write_all(&[&data[..4097], &data[4097..]]);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let (_dir, path) = write_all(&[&[0u8; 100][..]]);
        assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 100]);
    }
}
