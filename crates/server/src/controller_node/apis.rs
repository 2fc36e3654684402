//! The seam between the controller listener (sockets, framing, the quorum's own RPCs) and
//! the active controller (Kafka's controller APIs decided on the metadata image and
//! committed through the quorum): the listener hands every Kafka request it does not
//! answer itself to a [`ControllerApis`].

use osprey_protocol::{RequestBody, RequestHeader, ResponseBody};
use std::future::Future;
use std::pin::Pin;

/// A controller API's answer, once the records it wrote (if any) are committed.
pub type ControllerReply = Pin<Box<dyn Future<Output = ResponseBody> + Send>>;

/// Kafka's controller APIs as the active controller serves them (Kafka's
/// `ControllerApis`): BrokerRegistration, BrokerHeartbeat, AllocateProducerIds,
/// AlterPartition, and the admin requests a controller accepts (CreateTopics,
/// DeleteTopics, CreatePartitions, ...). Requests are applied in the order `handle` is
/// called; a node that is not the active controller answers NOT_CONTROLLER in the
/// response's error fields, as Kafka's controllers do.
pub trait ControllerApis: Send + Sync + 'static {
    /// The API keys served, with their version ranges, for the controller listener's
    /// ApiVersions (only what is implemented and tested).
    fn supported(&self) -> Vec<(i16, i16, i16)>;

    /// Handles one request (already checked against `supported`). `forwarded_for`: the
    /// principal (`Type:name`) of the client a broker forwarded the request for, in an
    /// EnvelopeRequest; its CreateTopics, DeleteTopics and CreatePartitions are measured
    /// against that principal's and the header's client id's `controller_mutation_rate`.
    /// `None`: a request its sender makes for itself (a broker's registration and
    /// heartbeats, the internal topics and Metadata auto-creations it asks for, a tool on
    /// the controller listener), which is not measured.
    fn handle_from(&self, header: RequestHeader, body: RequestBody, forwarded_for: Option<&str>) -> ControllerReply;

    /// Handles a request its sender makes for itself.
    fn handle(&self, header: RequestHeader, body: RequestBody) -> ControllerReply {
        self.handle_from(header, body, None)
    }
}
