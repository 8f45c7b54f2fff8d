//! A map shared by every worker that is read on the request path and written rarely:
//! copy-on-write behind an `ArcSwap`, so readers never take a lock and never wait for a
//! writer. A write copies the map (and retries if another write got in first), so it suits
//! maps that are small or that change only when something new is first seen.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use arc_swap::ArcSwap;

#[derive(Debug)]
pub struct CowMap<K, V> {
    map: ArcSwap<HashMap<K, V>>,
}

impl<K, V> Default for CowMap<K, V> {
    fn default() -> Self {
        Self { map: ArcSwap::from_pointee(HashMap::new()) }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> CowMap<K, V> {
    /// Reads the current map (a snapshot: writes after this call do not show in it).
    pub fn read<R>(&self, f: impl FnOnce(&HashMap<K, V>) -> R) -> R {
        f(&self.map.load())
    }

    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.load().get(key).cloned()
    }

    /// Applies `edit` to a copy of the map and publishes it. `edit` runs again on a fresh
    /// copy if another write was published meanwhile, so it must not count on running once.
    pub fn update(&self, mut edit: impl FnMut(&mut HashMap<K, V>)) {
        self.map.rcu(|map| {
            let mut copy = HashMap::clone(map);
            edit(&mut copy);
            Arc::new(copy)
        });
    }

    pub fn len(&self) -> usize {
        self.map.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.load().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_writers_lose_nothing() {
        let map: CowMap<u32, u32> = CowMap::default();
        std::thread::scope(|scope| {
            for t in 0..4u32 {
                let map = &map;
                scope.spawn(move || {
                    for i in 0..100 {
                        map.update(|m| {
                            m.insert(t * 1000 + i, i);
                        });
                    }
                });
            }
        });
        assert_eq!(map.len(), 400);
        assert_eq!(map.get(&3099), Some(99));
        assert!(map.read(|m| m.contains_key(&0)));
    }
}
