//! Governed SQL: a read-only DataFusion statement whose every table reference is the
//! caller's secure view of that table, exactly as a JSON scan of it applies the view
//! (the hot and cold union, the deletion suppression, row filters, masks and denies).
//!
//! This module owns statements: their limits, the catalog they see and the view each
//! table reference becomes. The Flight SQL protocol around them is
//! [`crate::flight`]'s; the view itself (which policies apply) is `hotgate-policy`'s.
//!
//! The modules depend one way:
//!
//! ```text
//! statement ── catalog ── view_table
//! ```

mod catalog;
mod statement;
mod view_table;

pub use catalog::{CATALOG, Referenced, Touched};
pub use statement::{
    DescribedStatement, PlannedStatement, READ_ONLY, SqlLimits, describe_statement, plan_statement,
};
