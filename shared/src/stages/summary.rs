//! A stage's per-batch counts (its `Summary`), declared once with `summary!` so that adding
//! one batch's counts to a campaign's total covers every field: a field added to a summary
//! is totalled without anyone remembering to.

use std::collections::BTreeMap;

/// A count that adds up: a number, or numbers by reason.
pub trait Tally {
    fn add(&mut self, other: &Self);
    /// A value with something in it (for the test that every field is added).
    fn sample() -> Self;
}

impl Tally for usize {
    fn add(&mut self, other: &Self) {
        *self += other;
    }

    fn sample() -> Self {
        1
    }
}

impl Tally for BTreeMap<&'static str, usize> {
    fn add(&mut self, other: &Self) {
        for (reason, n) in other {
            *self.entry(reason).or_default() += n;
        }
    }

    fn sample() -> Self {
        BTreeMap::from([("reason", 1)])
    }
}

/// Samples of one quantity, one per record (SendEmail's lateness, ms): written as a
/// distribution, so CloudWatch can give its percentiles. A total keeps the first
/// `emf::MAX_VALUES`: samples are for metrics, which take no more from one invocation.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Samples(pub Vec<i64>);

impl Samples {
    pub fn push(&mut self, value: i64) {
        if self.0.len() < crate::runtime::emf::MAX_VALUES {
            self.0.push(value);
        }
    }
}

impl Tally for Samples {
    fn add(&mut self, other: &Self) {
        for &v in &other.0 {
            self.push(v);
        }
    }

    fn sample() -> Self {
        Self(vec![1])
    }
}

/// Declares a stage's `Summary`: the struct (serialised in camelCase for logs and totals)
/// with `absorb`, which adds every field of another batch's summary.
macro_rules! summary {
    ($(#[$meta:meta])* pub struct $name:ident {
        $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
    }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        /// Every count, as the invocation's metrics (`runtime::emf`).
        impl $crate::runtime::emf::Measured for $name {
            fn metrics(&self) -> Vec<$crate::runtime::emf::Metric> {
                $crate::runtime::emf::counts_of(self)
            }
        }

        impl $name {
            /// The metric names its counts are written under; a count by reason as
            /// `field.*` (one metric per reason: `field.held_out`).
            pub fn metric_names() -> Vec<String> {
                let every = Self { $($field: $crate::stages::summary::Tally::sample(),)* };
                $crate::runtime::emf::counts_of(&every)
                    .into_iter()
                    .map(|m| m.name.replace(".reason", ".*"))
                    .collect()
            }

            /// Adds another batch's counts, every field (for runners that total a campaign).
            pub fn absorb(&mut self, other: &Self) {
                $($crate::stages::summary::Tally::add(&mut self.$field, &other.$field);)*
            }

            /// Every field set (for the test that `absorb` adds every field).
            #[cfg(test)]
            pub fn every_field_set() -> Self {
                Self { $($field: $crate::stages::summary::Tally::sample(),)* }
            }
        }
    };
}
pub(crate) use summary;

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// Every number in `value`, which must hold at least one; samples by how many.
    fn numbers(value: &Value) -> Vec<u64> {
        match value {
            Value::Number(n) => vec![n.as_u64().unwrap()],
            Value::Array(samples) => vec![samples.len() as u64],
            Value::Object(fields) => fields.values().flat_map(numbers).collect(),
            other => panic!("a summary holds only counts, not {other}"),
        }
    }

    fn doubles_every_field<S: serde::Serialize>(mut total: S, one: &S, absorb: fn(&mut S, &S)) {
        absorb(&mut total, one);
        let counts = numbers(&serde_json::to_value(&total).unwrap());
        assert!(!counts.is_empty());
        assert!(counts.iter().all(|&n| n == 2), "{counts:?}");
    }

    #[test]
    fn adding_a_summary_with_every_field_set_doubles_every_field() {
        use crate::stages::{create_emails, send_email, ses_events};
        doubles_every_field(
            send_email::Summary::every_field_set(),
            &send_email::Summary::every_field_set(),
            send_email::Summary::absorb,
        );
        doubles_every_field(
            create_emails::Summary::every_field_set(),
            &create_emails::Summary::every_field_set(),
            create_emails::Summary::absorb,
        );
        doubles_every_field(
            ses_events::Summary::every_field_set(),
            &ses_events::Summary::every_field_set(),
            ses_events::Summary::absorb,
        );
    }
}
