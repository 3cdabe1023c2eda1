//! One cache entry's bytes: a header that makes every entry check itself
//! before anything in it is trusted, then the compiled program.
//!
//! Layout (little-endian): magic `WPROFCC\n`, format version (u32), key
//! length (u32), the key's full text (compared byte for byte, so two keys
//! whose file names collide never share an entry), payload length (u64),
//! CRC-32 of the payload (u32), payload (the [`Compiled`] program and its
//! tracepoints' BTF ids, as JSON).

use crate::codegen::program::Compiled;
use crate::runtime::bpf::loader::TracepointIds;

const MAGIC: &[u8; 8] = b"WPROFCC\n";
/// Bumped whenever the layout or the meaning of the payload changes.
pub const FORMAT_VERSION: u32 = 1;

/// Why an entry was not used (it is then rebuilt and replaced).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EntryError {
    #[error("not a wprof cache entry")]
    Magic,
    #[error("entry format {0}, this wprof writes {FORMAT_VERSION}")]
    Version(u32),
    #[error("entry truncated at byte {0}")]
    Truncated(usize),
    #[error("entry made for another kernel, wprof build, options or trackers")]
    OtherKey,
    #[error("payload checksum mismatch")]
    Checksum,
    #[error("payload does not decode: {0}")]
    Decode(String),
}

/// The entry for `compiled` (with its tracepoints' ids) under `key`.
pub fn encode(
    key: &str,
    compiled: &Compiled,
    ids: &TracepointIds,
) -> Result<Vec<u8>, serde_json::Error> {
    let payload = serde_json::to_vec(&(compiled, ids))?;
    let mut out = Vec::with_capacity(payload.len() + key.len() + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// The program in `bytes`, if they are a sound entry made under `key`.
pub fn decode(bytes: &[u8], key: &str) -> Result<(Compiled, TracepointIds), EntryError> {
    let mut reader = Reader { bytes, at: 0 };
    if reader.take(MAGIC.len())? != MAGIC {
        return Err(EntryError::Magic);
    }
    let version = reader.u32()?;
    if version != FORMAT_VERSION {
        return Err(EntryError::Version(version));
    }
    let key_len = reader.u32()? as usize;
    if reader.take(key_len)? != key.as_bytes() {
        return Err(EntryError::OtherKey);
    }
    let payload_len = usize::try_from(reader.u64()?).map_err(|_| EntryError::Truncated(0))?;
    let checksum = reader.u32()?;
    let payload = reader.take(payload_len)?;
    if reader.at != bytes.len() {
        return Err(EntryError::Decode("bytes after the payload".into()));
    }
    if crc32fast::hash(payload) != checksum {
        return Err(EntryError::Checksum);
    }
    serde_json::from_slice(payload).map_err(|e| EntryError::Decode(e.to_string()))
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], EntryError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let end = end.ok_or(EntryError::Truncated(self.at))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u32, EntryError> {
        let raw = self.take(4)?;
        Ok(u32::from_le_bytes(
            raw.try_into().map_err(|_| EntryError::Truncated(self.at))?,
        ))
    }

    fn u64(&mut self) -> Result<u64, EntryError> {
        let raw = self.take(8)?;
        Ok(u64::from_le_bytes(
            raw.try_into().map_err(|_| EntryError::Truncated(self.at))?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{MapId, MapKind, MapSpec};

    fn compiled() -> Compiled {
        let mut maps = Vec::new();
        MapSpec::add_internal(&mut maps, "ring", MapKind::RingBuf, 0, 0, 4096);
        Compiled {
            maps,
            ringbuf: Some(MapId(0)),
            texts: vec!["%H:%M".into()],
            ..Default::default()
        }
    }

    /// An entry decodes to what was encoded, under the same key only.
    #[test]
    fn round_trip_under_its_key() {
        let ids = TracepointIds::from([("sched_switch".to_string(), 7)]);
        let bytes = encode("key A", &compiled(), &ids).expect("encode");
        let (back, back_ids) = decode(&bytes, "key A").expect("decode");
        assert_eq!(
            serde_json::to_string(&back).ok(),
            serde_json::to_string(&compiled()).ok()
        );
        assert_eq!(back_ids, ids);
        assert_eq!(decode(&bytes, "key B").err(), Some(EntryError::OtherKey));
    }

    /// Every flipped byte or truncation is caught before the payload is used.
    #[test]
    fn damage_is_detected() {
        let bytes = encode("key", &compiled(), &TracepointIds::new()).expect("encode");
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x20;
            assert!(decode(&damaged, "key").is_err(), "flip at {at} accepted");
        }
        for len in 0..bytes.len() {
            assert!(
                decode(&bytes[..len], "key").is_err(),
                "truncation to {len} accepted"
            );
        }
        let mut old = bytes.clone();
        old[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(decode(&old, "key").err(), Some(EntryError::Version(0)));
    }
}
