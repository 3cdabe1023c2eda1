//! Where members go: the x86-64 System V layout of a struct or union
//! (natural alignment, bitfields packed into units of their declared type
//! without crossing one, zero-width bitfields closing the unit), as gcc
//! and clang lay them out.

/// One member to place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Bytes of the member's type.
    pub size: u32,
    /// Alignment of the member's type in bytes.
    pub align: u32,
    /// The width of a bitfield.
    pub bits: Option<u32>,
    /// A bitfield without a name: it does not raise the record's alignment.
    pub unnamed: bool,
}

/// The placed members and the record's size and alignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bit offset of each member, in order.
    pub offsets_bits: Vec<u32>,
    pub size: u32,
    pub align: u32,
}

/// Lays out `slots` as a struct, or as a union when `union`.
pub fn layout(slots: &[Slot], union: bool) -> Layout {
    let mut offsets_bits = Vec::with_capacity(slots.len());
    let mut cursor = 0u64;
    let mut end = 0u64;
    let mut align = 1u32;
    for slot in slots {
        let unit = u64::from(slot.align.max(1)) * 8;
        let at = match slot.bits {
            _ if union => 0,
            Some(0) => cursor.next_multiple_of(unit),
            Some(width) => {
                let span = u64::from(slot.size) * 8;
                let crosses = span > 0 && cursor / span != (cursor + u64::from(width) - 1) / span;
                if crosses {
                    cursor.next_multiple_of(unit)
                } else {
                    cursor
                }
            }
            None => cursor.next_multiple_of(unit),
        };
        let width = slot.bits.map_or(u64::from(slot.size) * 8, u64::from);
        offsets_bits.push(u32::try_from(at).unwrap_or(u32::MAX));
        cursor = at + width;
        end = end.max(cursor);
        if !slot.unnamed {
            align = align.max(slot.align);
        }
    }
    let size = end.next_multiple_of(u64::from(align) * 8) / 8;
    Layout {
        offsets_bits,
        size: u32::try_from(size).unwrap_or(u32::MAX),
        align,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(size: u32) -> Slot {
        Slot {
            size,
            align: size,
            bits: None,
            unnamed: false,
        }
    }

    fn bits(size: u32, width: u32) -> Slot {
        Slot {
            bits: Some(width),
            ..field(size)
        }
    }

    /// Members are aligned to their size; the record to its widest member.
    #[test]
    fn aligns_members() {
        let l = layout(&[field(1), field(4), field(8), field(2)], false);
        assert_eq!(l.offsets_bits, [0, 32, 64, 128]);
        assert_eq!((l.size, l.align), (24, 8));
    }

    /// Bitfields share their type's unit until one would cross it.
    #[test]
    fn packs_bitfields() {
        let l = layout(
            &[bits(4, 3), bits(4, 5), bits(4, 30), bits(1, 0), field(1)],
            false,
        );
        assert_eq!(l.offsets_bits, [0, 3, 32, 64, 64]);
        assert_eq!(l.size, 12);
    }

    /// A union's members all start at 0; it is as big as its biggest.
    #[test]
    fn unions_overlap() {
        let l = layout(&[field(4), field(1)], true);
        assert_eq!(l.offsets_bits, [0, 0]);
        assert_eq!((l.size, l.align), (4, 4));
    }
}
