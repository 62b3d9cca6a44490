//! hotgate-store integration tests: one binary, one module per concern.

mod alignment;
mod common;
mod deletion;
mod durability;
mod inspect;
mod primary_key;
mod reads;
mod retention;
mod sources;
mod writes;
