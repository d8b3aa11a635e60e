//! How many people clicked a pick, without a record of who: a HyperLogLog sketch of 128
//! registers. A click is a person's `Mark` (a register and a rank, from a keyed hash of the
//! campaign, the pick and the recipient: `SlotSealer::mark`); the sketch keeps the highest
//! rank each register has seen. The same person always makes the same mark, so repeating a
//! click changes nothing: a person counts once however often they click. A register holds
//! a number that any recipient whose hash falls on it could have set, never a recipient's
//! id, so a sketch says how many, not who (with TrackOpensAndClicks off, no per-recipient
//! click record exists anywhere; a pick shown in few emails still has few possible clickers,
//! as with any count).
//!
//! The estimate (linear counting, rounded down) never makes one person two and undercounts
//! rather than over: up to 15 people it is exact except that people sharing a register count
//! once (a collision is about 2 % likely at 3 people, 8 % at 5, 30 % at 10); beyond, its
//! standard error is about 9 %.

use std::collections::BTreeMap;

/// Registers per sketch (a power of two).
pub const REGISTERS: u8 = 128;
const INDEX_BITS: u32 = REGISTERS.trailing_zeros();

/// One person's mark on one pick's sketches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mark {
    /// `0..REGISTERS`.
    pub register: u8,
    /// 1 + the leading zeros of the rest of the hash: `1..=58`.
    pub rank: u8,
}

impl Mark {
    /// From 64 uniformly distributed bits.
    pub fn from_hash(hash: u64) -> Self {
        let register = (hash & (u64::from(REGISTERS) - 1)) as u8;
        let rest = hash >> INDEX_BITS;
        // `rest` has INDEX_BITS leading zeros of its own; an all-zero rest gets the top rank.
        let rank = (rest.leading_zeros() - INDEX_BITS + 1) as u8;
        Self { register, rank }
    }
}

/// A sketch: the highest rank per register (registers never marked are left out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sketch {
    registers: BTreeMap<u8, u8>,
}

impl Sketch {
    /// From stored `(register, rank)` pairs (out-of-range registers and zero ranks ignored).
    pub fn from_registers(registers: impl IntoIterator<Item = (u8, u8)>) -> Self {
        let mut sketch = Self::default();
        for (register, rank) in registers {
            sketch.raise(Mark { register, rank });
        }
        sketch
    }

    /// The marked registers, in order.
    pub fn registers(&self) -> impl Iterator<Item = (u8, u8)> + '_ {
        self.registers.iter().map(|(r, k)| (*r, *k))
    }

    pub fn rank(&self, register: u8) -> u8 {
        self.registers.get(&register).copied().unwrap_or(0)
    }

    /// Whether `mark` raised the sketch (what a conditional write of the register does).
    pub fn raise(&mut self, mark: Mark) -> bool {
        if mark.register >= REGISTERS || mark.rank == 0 || self.rank(mark.register) >= mark.rank {
            return false;
        }
        self.registers.insert(mark.register, mark.rank);
        true
    }

    /// Everyone in either sketch (a union: the higher rank of each register).
    pub fn merge(&mut self, other: &Sketch) {
        for (register, rank) in other.registers() {
            self.raise(Mark { register, rank });
        }
    }

    pub fn is_empty(&self) -> bool {
        self.registers.is_empty()
    }

    /// How many people made the marks (estimated; see the module's documentation).
    pub fn people(&self) -> u64 {
        if self.registers.is_empty() {
            return 0;
        }
        let m = f64::from(REGISTERS);
        let zeros = usize::from(REGISTERS) - self.registers.len();
        let sum: f64 = zeros as f64
            + self
                .registers
                .values()
                .map(|rank| 2f64.powi(-i32::from(*rank)))
                .sum::<f64>();
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let raw = alpha * m * m / sum;
        if raw <= 2.5 * m && zeros > 0 {
            (m * (m / zeros as f64).ln()).floor() as u64
        } else {
            raw.round() as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distinct, well-spread hashes (SplitMix64).
    fn hash(i: u64) -> u64 {
        let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[test]
    fn a_person_counts_once_however_often_they_click() {
        let mut sketch = Sketch::default();
        assert_eq!(sketch.people(), 0);
        let me = Mark::from_hash(hash(1));
        assert!(sketch.raise(me));
        for _ in 0..1_000 {
            assert!(!sketch.raise(me), "the same mark raises nothing");
        }
        assert_eq!(sketch.people(), 1);
    }

    #[test]
    fn small_counts_are_exact_and_large_ones_close() {
        // People whose marks fall on distinct registers are counted exactly up to 15.
        let mut sketch = Sketch::default();
        let mut seen = std::collections::HashSet::new();
        let mut people = 0;
        for i in 0.. {
            let mark = Mark::from_hash(hash(i));
            if !seen.insert(mark.register) {
                continue;
            }
            sketch.raise(mark);
            people += 1;
            assert_eq!(sketch.people(), people, "{people} people");
            if people == 15 {
                break;
            }
        }
        for n in [1_000u64, 20_000, 300_000] {
            let mut sketch = Sketch::default();
            for i in 0..n {
                sketch.raise(Mark::from_hash(hash(i + 7_000_000)));
            }
            let error = (sketch.people() as f64 - n as f64).abs() / n as f64;
            assert!(error < 0.2, "{n}: {} ({error:.3})", sketch.people());
        }
    }

    #[test]
    fn union_is_everyone_in_either_and_marks_are_in_range() {
        let (mut a, mut b) = (Sketch::default(), Sketch::default());
        for i in 0..6 {
            a.raise(Mark::from_hash(hash(i)));
        }
        for i in 3..9 {
            b.raise(Mark::from_hash(hash(i)));
        }
        let mut all = a.clone();
        all.merge(&b);
        let mut direct = Sketch::default();
        for i in 0..9 {
            direct.raise(Mark::from_hash(hash(i)));
        }
        assert_eq!(all, direct);
        assert_eq!(Sketch::from_registers(all.registers()), all);
        assert_eq!(
            Mark::from_hash(0),
            Mark {
                register: 0,
                rank: 58
            }
        );
        assert_eq!(
            Mark::from_hash(u64::MAX),
            Mark {
                register: 127,
                rank: 1
            }
        );
        // Junk from a store is ignored, not trusted.
        assert!(Sketch::from_registers([(200, 3), (5, 0)]).is_empty());
    }
}
