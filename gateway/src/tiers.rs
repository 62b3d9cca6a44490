//! Which tiers a read touches: the hot store, the cold Iceberg snapshot, or both. The
//! planner decides it; the audit and the tier-boundary counters record it. Depends on
//! nothing else in the gateway.

/// Which tiers a read touches, as the audit and the tier-boundary counters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiers {
    Hot,
    Cold,
    HotAndCold,
}

impl Tiers {
    pub fn names(self) -> Vec<String> {
        match self {
            Tiers::Hot => vec!["hot".into()],
            Tiers::Cold => vec!["cold".into()],
            Tiers::HotAndCold => vec!["hot".into(), "cold".into()],
        }
    }
}
