//! [`Few`]: at most `N` small `Copy` items held inline. The pipeline keys
//! are built on every dispatch to look their pipeline up, so their flags
//! and constants live here rather than in `Vec`s (no heap allocation per
//! dispatch for them), and so do the rope kernels' params words.

use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// A list of at most `N` items, inline; compares, hashes and prints as the
/// slice of its items.
#[derive(Clone, Copy)]
pub struct Few<T: Copy + Default, const N: usize> {
    len: usize,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> Few<T, N> {
    /// No items.
    pub fn new() -> Self {
        Few {
            len: 0,
            items: [T::default(); N],
        }
    }

    /// Appends `v`. Panics past `N` items: the lists name a kernel's
    /// variant or hold its params block, a fixed few chosen by code, never
    /// by input.
    pub fn push(&mut self, v: T) {
        assert!(self.len < N, "more than {N} items in a Few list");
        self.items[self.len] = v;
        self.len += 1;
    }

    /// Appends each of `vs` ([`Few::push`]).
    pub fn extend_from_slice(&mut self, vs: &[T]) {
        for &v in vs {
            self.push(v);
        }
    }
}

impl<T: Copy + Default, const N: usize> Default for Few<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default, const N: usize> Deref for Few<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items[..self.len]
    }
}

impl<T: Copy + Default, const N: usize> Extend<T> for Few<T, N> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, it: I) {
        for v in it {
            self.push(v);
        }
    }
}

impl<T: Copy + Default + PartialEq, const N: usize> PartialEq for Few<T, N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Copy + Default + Eq, const N: usize> Eq for Few<T, N> {}

impl<T: Copy + Default + Hash, const N: usize> Hash for Few<T, N> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (**self).hash(h)
    }
}

impl<T: Copy + Default + std::fmt::Debug, const N: usize> std::fmt::Debug for Few<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of<H: Hash + ?Sized>(v: &H) -> u64 {
        let mut h = DefaultHasher::new();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn compares_and_hashes_as_its_items() {
        let mut a: Few<&str, 4> = Few::new();
        a.push("F16");
        a.extend(Some("P8"));
        let mut b: Few<&str, 4> = Few::new();
        b.extend_from_slice(&["F16", "P8"]);
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&["F16", "P8"][..]));
        assert_eq!(&*a, &["F16", "P8"]);
        b.push("NORM");
        assert_ne!(a, b);
        assert_eq!(format!("{b:?}"), r#"["F16", "P8", "NORM"]"#);
    }

    #[test]
    #[should_panic(expected = "more than 2 items")]
    fn refuses_more_than_its_capacity() {
        let mut a: Few<u8, 2> = Few::new();
        a.extend([1, 2, 3]);
    }
}
