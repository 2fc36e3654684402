//! Record batches: filled in by the records work.
