//! Places tables in the rows map: first fit over the free ranges, freed
//! ranges merged with their neighbours.

/// Free ranges `(first, len)` of a map of `capacity` rows, ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowAllocator {
    free: Vec<(u32, u32)>,
    capacity: u32,
}

impl RowAllocator {
    pub fn new(capacity: u32) -> Self {
        let free = if capacity > 0 {
            vec![(0, capacity)]
        } else {
            Vec::new()
        };
        RowAllocator { free, capacity }
    }

    /// The first row of `len` free rows, or `None` when no range is large enough.
    pub fn allocate(&mut self, len: u32) -> Option<u32> {
        let index = self.free.iter().position(|&(_, free)| free >= len)?;
        let (first, free) = self.free[index];
        if free == len {
            self.free.remove(index);
        } else {
            self.free[index] = (first + len, free - len);
        }
        Some(first)
    }

    /// Returns `len` rows at `first`.
    pub fn release(&mut self, first: u32, len: u32) {
        if len == 0 {
            return;
        }
        let index = self.free.partition_point(|&(start, _)| start < first);
        self.free.insert(index, (first, len));
        // Merge with the next range, then with the previous.
        if index + 1 < self.free.len() && first + len == self.free[index + 1].0 {
            self.free[index].1 += self.free.remove(index + 1).1;
        }
        if index > 0 && self.free[index - 1].0 + self.free[index - 1].1 == first {
            self.free[index - 1].1 += self.free.remove(index).1;
        }
    }

    /// Rows in use.
    pub fn used(&self) -> u32 {
        self.capacity - self.free.iter().map(|&(_, len)| len).sum::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocation is first fit; releasing merges ranges back to one.
    #[test]
    fn first_fit_and_merge() {
        let mut a = RowAllocator::new(100);
        assert_eq!(a.allocate(30), Some(0));
        assert_eq!(a.allocate(30), Some(30));
        assert_eq!(a.allocate(30), Some(60));
        assert_eq!(a.allocate(30), None);
        a.release(0, 30);
        assert_eq!(a.allocate(40), None);
        a.release(60, 30);
        a.release(30, 30);
        assert_eq!(a.used(), 0);
        assert_eq!(a.allocate(100), Some(0));
    }

    /// A freed hole is reused by a table that fits it.
    #[test]
    fn reuses_holes() {
        let mut a = RowAllocator::new(10);
        assert_eq!(a.allocate(4), Some(0));
        assert_eq!(a.allocate(4), Some(4));
        a.release(0, 4);
        assert_eq!(a.allocate(3), Some(0));
        assert_eq!(a.used(), 7);
    }
}
