//! openraft's async runtime: Tokio, with the random numbers (election timeouts) drawn from
//! a seeded generator, so that a simulation on a current-thread runtime with paused time
//! replays from its seed.
//!
//! The generator is per thread. A thread that never called [`seed_thread_rng`] seeds it
//! from the operating system at first use, as `rand::thread_rng` would.

use openraft::{AsyncRuntime, TokioRuntime};
use rand_core::{RngCore, SeedableRng};
use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

thread_local! {
    static RNG: RefCell<Option<Xorshift>> = const { RefCell::new(None) };
}

/// Seeds this thread's generator: every random choice openraft makes on this thread from
/// now on follows from `seed`.
pub fn seed_thread_rng(seed: u64) {
    RNG.with(|r| *r.borrow_mut() = Some(Xorshift::seed_from_u64(seed)));
}

/// Tokio, with a seeded per-thread generator for openraft's random choices.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct QuorumRuntime;

/// A handle on this thread's generator.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadRng;

impl RngCore for ThreadRng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }

    fn next_u64(&mut self) -> u64 {
        RNG.with(|r| {
            let mut r = r.borrow_mut();
            r.get_or_insert_with(|| {
                let mut seed = [0u8; 8];
                // Without OS randomness every node would pick the same timeouts and split
                // votes more often; still correct, so a failure here is not fatal.
                let _ = getrandom::fill(&mut seed);
                Xorshift::seed_from_u64(u64::from_le_bytes(seed))
            })
            .next()
        })
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        rand_core::impls::fill_bytes_via_next(self, dest)
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// xorshift64*: small and good enough to spread election timeouts.
#[derive(Debug, Clone)]
struct Xorshift(u64);

impl Xorshift {
    fn seed_from_u64(seed: u64) -> Xorshift {
        // SplitMix64 of the seed, so that nearby seeds give unrelated streams (and 0 works).
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Xorshift((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

impl SeedableRng for Xorshift {
    type Seed = [u8; 8];
    fn from_seed(seed: [u8; 8]) -> Xorshift {
        Xorshift::seed_from_u64(u64::from_le_bytes(seed))
    }
}

impl AsyncRuntime for QuorumRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: Send + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + Send> = <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = ThreadRng;
    type OneshotSender<T: Send> = <TokioRuntime as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <TokioRuntime as AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: Send> = <TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + Send + 'static,
        T::Output: Send + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + Send>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + Send>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> ThreadRng {
        ThreadRng
    }

    fn oneshot<T: Send>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>) {
        TokioRuntime::oneshot()
    }
}
