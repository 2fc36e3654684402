//! Property and bad-input tests over every generated message.

mod bad_input;
mod roundtrip;
