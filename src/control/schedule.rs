//! Deadlines by cluster name: which clusters' periodic work (weight updates, original
//! destination clean-ups) is due, without visiting the clusters that have none.

use std::collections::{BTreeSet, HashMap};

use tokio::time::Instant;

/// At most one deadline per name; the earliest first.
#[derive(Debug, Default)]
pub struct Schedule {
    due: BTreeSet<(Instant, String)>,
    at: HashMap<String, Instant>,
}

impl Schedule {
    /// Sets (or moves) the deadline of `name`.
    pub fn set(&mut self, name: &str, at: Instant) {
        if let Some(previous) = self.at.insert(name.to_owned(), at) {
            self.due.remove(&(previous, name.to_owned()));
        }
        self.due.insert((at, name.to_owned()));
    }

    /// Sets the deadline of `name` unless it has one.
    pub fn set_if_absent(&mut self, name: &str, at: Instant) {
        if !self.at.contains_key(name) {
            self.set(name, at);
        }
    }

    pub fn remove(&mut self, name: &str) {
        if let Some(at) = self.at.remove(name) {
            self.due.remove(&(at, name.to_owned()));
        }
    }

    /// The names that have a deadline.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.at.keys()
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Takes the names whose deadline is `now` or earlier, earliest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<String> {
        let mut taken = Vec::new();
        while let Some((at, _)) = self.due.first()
            && *at <= now
        {
            if let Some((_, name)) = self.due.pop_first() {
                self.at.remove(&name);
                taken.push(name);
            }
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn takes_what_is_due_earliest_first_and_moves_deadlines() {
        let now = Instant::now();
        let mut schedule = Schedule::default();
        schedule.set("b", now + Duration::from_secs(2));
        schedule.set("a", now + Duration::from_secs(1));
        schedule.set("c", now + Duration::from_secs(9));
        schedule.set_if_absent("c", now);
        schedule.set("b", now + Duration::from_secs(3));
        assert_eq!(schedule.next(), Some(now + Duration::from_secs(1)));
        assert_eq!(schedule.take_due(now + Duration::from_secs(3)), ["a", "b"]);
        assert_eq!(schedule.names().collect::<Vec<_>>(), ["c"]);
        schedule.remove("c");
        assert!(schedule.next().is_none() && schedule.names().next().is_none());
    }
}
