//! Random number generators: Philox4x32-10, counter-based, one state per
//! generator = (seed, offset), a default generator per device, user-created
//! ones, and a registry through which a third-party backend supplies its
//! own (c10's `REGISTER_GENERATOR_PRIVATEUSE1`).
//!
//! # The stream a seed names
//!
//! A seed names one infinite stream of `u32` words: word `p` (its
//! *position*) is lane `p % 4` of the Philox4x32-10 block computed from
//! counter `(p / 4 as 64 bits, 0, 0)` and key `(seed as two 32-bit halves)`
//! ([`philox4x32_10`], [`stream_word`]). Nothing else goes in: a kernel
//! writing element `i` of a launch at offset `o` reads position `o + i`, so
//! the values are the same on every backend and for every launch geometry
//! (see `keel::random`).
//!
//! # Offsets (Note [Philox offsets])
//!
//! A generator's offset is the first stream position no launch has used.
//! An operation that needs `n` words *reserves* them with
//! [`Generator::reserve`], which returns the (seed, offset) to launch with
//! and advances the offset by `n` rounded up to a multiple of 4: PyTorch's
//! CUDA generator does the same (`philox_cuda_state` rounds every increment
//! up to a multiple of 4 and keeps `philox_offset_per_thread` a multiple of
//! 4). So offsets always start a Philox block, and two operations never
//! share one. PyTorch's offset counts per-thread increments of a
//! geometry-dependent launch; Keel's counts words of the one stream, which
//! is what makes the result independent of the geometry.
//!
//! # Sharing and threads
//!
//! A [`Generator`] is a handle: clones share one state (like
//! `torch.Generator` objects passed around), behind a mutex, so threads may
//! draw from one generator; each reservation is atomic, so concurrent
//! operations get disjoint ranges of the stream. [`Generator::fork`] makes
//! an independent generator instead.
//!
//! This module never launches work: kernels live in `keel::random`.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::api::resolve;
use crate::core::{Device, DeviceType};
use crate::{Error, Result};

/// The multipliers of Philox4x32 (Random123's `PHILOX_M4x32_0/1`).
pub const PHILOX_M: [u32; 2] = [0xD251_1F53, 0xCD9E_8D57];
/// The key increments (Weyl constants) of Philox4x32 (`PHILOX_W32_0/1`).
pub const PHILOX_W: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85];
/// Rounds of Philox4x32-10.
pub const PHILOX_ROUNDS: u32 = 10;

/// The seed a default generator starts with until it is seeded: PyTorch's
/// `default_rng_seed_val`.
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as
/// easy as 1, 2, 3", SC'11): four 32-bit words from a 128-bit counter and
/// a 64-bit key. The reference every kernel is checked against.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..PHILOX_ROUNDS {
        if round > 0 {
            k = [
                k[0].wrapping_add(PHILOX_W[0]),
                k[1].wrapping_add(PHILOX_W[1]),
            ];
        }
        let p0 = u64::from(PHILOX_M[0]) * u64::from(c[0]);
        let p1 = u64::from(PHILOX_M[1]) * u64::from(c[2]);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The Philox block `block` of `seed`'s stream: stream positions
/// `4 * block .. 4 * block + 4`.
pub fn stream_block(seed: u64, block: u64) -> [u32; 4] {
    philox4x32_10(
        [block as u32, (block >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// The word at stream position `position` of `seed`'s stream.
pub fn stream_word(seed: u64, position: u64) -> u32 {
    stream_block(seed, position / 4)[(position % 4) as usize]
}

/// Where an operation reads the stream: the seed and the first position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PhiloxState {
    /// The key of the stream.
    pub seed: u64,
    /// The first stream position the operation uses.
    pub offset: u64,
}

/// What a generator implementation provides. Keel's own is [`Philox`]; a
/// third-party backend may register another ([`register_generator`]). The
/// random kernels are Philox kernels, so a generator hands out Philox
/// (seed, offset) pairs through [`GeneratorImpl::reserve`].
pub trait GeneratorImpl: Send + fmt::Debug {
    /// The device this generator serves.
    fn device(&self) -> Device;
    /// Sets the seed and restarts the stream (offset 0).
    fn set_current_seed(&mut self, seed: u64);
    /// The seed last set.
    fn current_seed(&self) -> u64;
    /// The next unused stream position (a multiple of 4).
    fn offset(&self) -> u64;
    /// Moves to stream position `offset`; an error unless a multiple of 4.
    fn set_offset(&mut self, offset: u64) -> Result<()>;
    /// Reserves `words` stream positions (rounded up to a multiple of 4,
    /// Note [Philox offsets]) and returns where they start.
    fn reserve(&mut self, words: u64) -> Result<PhiloxState>;
    /// The state as bytes, for [`GeneratorImpl::set_state`].
    fn get_state(&self) -> Vec<u8>;
    /// Restores a state from [`GeneratorImpl::get_state`]; a malformed
    /// state is an error and leaves the generator unchanged.
    fn set_state(&mut self, state: &[u8]) -> Result<()>;
}

/// Keel's generator: Philox4x32-10, state (seed, offset).
///
/// Its state bytes are 20: the magic `KPX1`, the seed and the offset (both
/// `u64`, little endian).
#[derive(Debug, Clone)]
pub struct Philox {
    device: Device,
    seed: u64,
    offset: u64,
}

/// The magic that starts a [`Philox`] state.
pub const PHILOX_STATE_MAGIC: [u8; 4] = *b"KPX1";
/// The length of a [`Philox`] state.
pub const PHILOX_STATE_LEN: usize = 20;

impl Philox {
    /// A generator for `device` with `seed`, at offset 0.
    pub fn new(device: Device, seed: u64) -> Philox {
        Philox {
            device,
            seed,
            offset: 0,
        }
    }

    /// Decodes a state made by [`GeneratorImpl::get_state`] into
    /// (seed, offset).
    pub fn decode_state(state: &[u8]) -> Result<PhiloxState> {
        if state.len() != PHILOX_STATE_LEN {
            return Err(Error::invalid(format!(
                "expected a {PHILOX_STATE_LEN}-byte Philox generator state (magic \"KPX1\", \
                 seed u64, offset u64), found {} bytes",
                state.len()
            )));
        }
        if state[..4] != PHILOX_STATE_MAGIC {
            return Err(Error::invalid(format!(
                "expected a Philox generator state starting with \"KPX1\", found {:02x?}",
                &state[..4]
            )));
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&state[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let (seed, offset) = (word(4), word(12));
        check_offset(offset)?;
        Ok(PhiloxState { seed, offset })
    }

    /// Encodes (seed, offset) as a state.
    pub fn encode_state(state: PhiloxState) -> Vec<u8> {
        let mut v = Vec::with_capacity(PHILOX_STATE_LEN);
        v.extend_from_slice(&PHILOX_STATE_MAGIC);
        v.extend_from_slice(&state.seed.to_le_bytes());
        v.extend_from_slice(&state.offset.to_le_bytes());
        v
    }
}

fn check_offset(offset: u64) -> Result<()> {
    if !offset.is_multiple_of(4) {
        return Err(Error::invalid(format!(
            "a Philox offset must be a multiple of 4 (each Philox block gives 4 words), found {offset}"
        )));
    }
    Ok(())
}

impl GeneratorImpl for Philox {
    fn device(&self) -> Device {
        self.device
    }
    fn set_current_seed(&mut self, seed: u64) {
        self.seed = seed;
        self.offset = 0;
    }
    fn current_seed(&self) -> u64 {
        self.seed
    }
    fn offset(&self) -> u64 {
        self.offset
    }
    fn set_offset(&mut self, offset: u64) -> Result<()> {
        check_offset(offset)?;
        self.offset = offset;
        Ok(())
    }
    fn reserve(&mut self, words: u64) -> Result<PhiloxState> {
        let increment = words
            .checked_next_multiple_of(4)
            .ok_or_else(|| Error::invalid(format!("cannot reserve {words} random words")))?;
        let end = self.offset.checked_add(increment).ok_or_else(|| {
            Error::invalid(format!(
                "the generator's stream is used up: offset {} + {increment} words passes 2^64; \
                 reseed it",
                self.offset
            ))
        })?;
        let at = PhiloxState {
            seed: self.seed,
            offset: self.offset,
        };
        self.offset = end;
        Ok(at)
    }
    fn get_state(&self) -> Vec<u8> {
        Philox::encode_state(PhiloxState {
            seed: self.seed,
            offset: self.offset,
        })
    }
    fn set_state(&mut self, state: &[u8]) -> Result<()> {
        let s = Philox::decode_state(state)?;
        self.seed = s.seed;
        self.offset = s.offset;
        Ok(())
    }
}

/// Makes a generator for a device of the type it was registered for.
pub type GeneratorFactory = fn(Device) -> Result<Box<dyn GeneratorImpl>>;

static FACTORIES: RwLock<[Option<GeneratorFactory>; DeviceType::COUNT]> =
    RwLock::new([None; DeviceType::COUNT]);

/// Registers the generator factory of `ty` (c10's
/// `REGISTER_GENERATOR_PRIVATEUSE1`): only [`DeviceType::PrivateUse1`] takes
/// one (the built-in types use [`Philox`]), and only once.
pub fn register_generator(ty: DeviceType, factory: GeneratorFactory) -> Result<()> {
    if ty != DeviceType::PrivateUse1 {
        return Err(Error::invalid(format!(
            "only the PrivateUse1 device type registers a generator; {} uses Keel's Philox generator",
            ty.name_lower()
        )));
    }
    let mut slots = FACTORIES.write().unwrap_or_else(PoisonError::into_inner);
    let slot = &mut slots[usize::from(ty.code())];
    if slot.is_some() {
        return Err(Error::invalid(format!(
            "a generator is already registered for {}; it can be registered only once",
            ty.name_lower()
        )));
    }
    *slot = Some(factory);
    Ok(())
}

fn make(device: Device, seed: u64) -> Result<Box<dyn GeneratorImpl>> {
    let ty = device.device_type();
    if ty != DeviceType::PrivateUse1 {
        return Ok(Box::new(Philox::new(device, seed)));
    }
    let factory = FACTORIES.read().unwrap_or_else(PoisonError::into_inner)[usize::from(ty.code())];
    let factory = factory.ok_or_else(|| {
        Error::invalid(format!(
            "no generator is registered for {}: a third-party backend registers one with \
             keel::generator::register_generator",
            ty.name_lower()
        ))
    })?;
    let mut g = factory(device)?;
    g.set_current_seed(seed);
    Ok(g)
}

/// A handle on a generator; clones share its state.
#[derive(Clone)]
pub struct Generator {
    device: Device,
    inner: Arc<Mutex<Box<dyn GeneratorImpl>>>,
}

impl fmt::Debug for Generator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.lock();
        f.debug_struct("Generator")
            .field("device", &self.device)
            .field("seed", &g.current_seed())
            .field("offset", &g.offset())
            .finish()
    }
}

impl Generator {
    /// A new generator for `device` (`torch.Generator(device)`), seeded
    /// with [`DEFAULT_SEED`]. The device must exist (index `-1` means the
    /// thread's current device); a PrivateUse1 device needs a registered
    /// factory.
    pub fn new(device: Device) -> Result<Generator> {
        let device = resolve(device)?;
        Ok(Generator::from_impl(make(device, DEFAULT_SEED)?))
    }

    /// Wraps an implementation.
    pub fn from_impl(generator: Box<dyn GeneratorImpl>) -> Generator {
        Generator {
            device: generator.device(),
            inner: Arc::new(Mutex::new(generator)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Box<dyn GeneratorImpl>> {
        // A panic in a user's GeneratorImpl leaves plain numbers behind.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The device it serves.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Sets the seed and restarts the stream at offset 0.
    pub fn manual_seed(&self, seed: u64) -> &Generator {
        self.lock().set_current_seed(seed);
        self
    }

    /// Seeds with a non-deterministic seed (from the operating system's
    /// randomness behind `std`'s `RandomState`, the time and a counter)
    /// and returns it.
    pub fn seed(&self) -> u64 {
        let s = nondeterministic_seed();
        self.manual_seed(s);
        s
    }

    /// The seed last set (`initial_seed`).
    pub fn initial_seed(&self) -> u64 {
        self.lock().current_seed()
    }

    /// The next unused stream position.
    pub fn offset(&self) -> u64 {
        self.lock().offset()
    }

    /// Moves to stream position `offset` (a multiple of 4).
    pub fn set_offset(&self, offset: u64) -> Result<()> {
        self.lock().set_offset(offset)
    }

    /// Reserves `words` stream positions for one operation (Note [Philox
    /// offsets]): the (seed, offset) to launch with.
    pub fn reserve(&self, words: u64) -> Result<PhiloxState> {
        self.lock().reserve(words)
    }

    /// The state as bytes.
    pub fn get_state(&self) -> Vec<u8> {
        self.lock().get_state()
    }

    /// Restores a state from [`Generator::get_state`]; the same operations
    /// then give the same numbers again.
    pub fn set_state(&self, state: &[u8]) -> Result<()> {
        self.lock().set_state(state)
    }

    /// An independent generator on the same device. Its seed is two words
    /// of this generator's stream (one reserved block, so this generator
    /// advances by 4), its offset 0: a different Philox key, hence a
    /// different stream, deterministic given this generator's state.
    /// Forking twice gives two different generators.
    pub fn fork(&self) -> Result<Generator> {
        let at = self.reserve(4)?;
        let w = stream_block(at.seed, at.offset / 4);
        let seed = u64::from(w[0]) | u64::from(w[1]) << 32;
        Ok(Generator::from_impl(make(self.device, seed)?))
    }

    /// Whether two handles share one state.
    pub fn same(&self, other: &Generator) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// A seed from the operating system's randomness (through `std`'s
/// `RandomState`), the time and a process-wide counter.
pub fn nondeterministic_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(now);
    h.finish()
}

struct Defaults {
    generators: HashMap<Device, Generator>,
    /// The seed of [`manual_seed`], for default generators made later.
    seed: u64,
}

static DEFAULTS: LazyLock<Mutex<Defaults>> = LazyLock::new(|| {
    Mutex::new(Defaults {
        generators: HashMap::new(),
        seed: DEFAULT_SEED,
    })
});

fn defaults() -> MutexGuard<'static, Defaults> {
    DEFAULTS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The device's default generator (`torch.cuda.default_generators[i]`),
/// made on first use; every call returns a handle on the same state.
pub fn default_generator(device: Device) -> Result<Generator> {
    let device = resolve(device)?;
    let mut d = defaults();
    if let Some(g) = d.generators.get(&device) {
        return Ok(g.clone());
    }
    let g = Generator::from_impl(make(device, d.seed)?);
    d.generators.insert(device, g.clone());
    Ok(g)
}

/// Seeds every default generator (`torch.manual_seed`): those made so far,
/// and those made later start from `seed`.
pub fn manual_seed(seed: u64) {
    let mut d = defaults();
    d.seed = seed;
    for g in d.generators.values() {
        g.manual_seed(seed);
    }
}
