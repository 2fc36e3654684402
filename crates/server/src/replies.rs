//! Requests a coordinator answers later: the reply channels the group and transaction
//! bridges hold until the coordinator's `Respond` output names them.

use std::collections::HashMap;
use tokio::sync::oneshot;

#[derive(Debug)]
pub struct Replies<R> {
    waiting: HashMap<u64, oneshot::Sender<R>>,
    next: u64,
}

impl<R> Default for Replies<R> {
    fn default() -> Self {
        Replies { waiting: HashMap::new(), next: 1 }
    }
}

impl<R> Replies<R> {
    /// A fresh reply id and the receiver its answer arrives on.
    pub fn hold(&mut self) -> (u64, oneshot::Receiver<R>) {
        let (tx, rx) = oneshot::channel();
        let id = self.next;
        self.next += 1;
        self.waiting.insert(id, tx);
        (id, rx)
    }

    /// Sends the answer for `id`, if its requester still waits for it.
    pub fn answer(&mut self, id: u64, response: R) {
        if let Some(tx) = self.waiting.remove(&id) {
            let _ = tx.send(response);
        }
    }
}
