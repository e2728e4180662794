//! Packing buffers kept for reuse: every product packs its operands into fresh bf16 buffers
//! (the LM head's two packed copies are vocabulary × hidden each), and a fresh buffer's pages
//! fault in one by one on first write. Returned buffers wait here, up to [`RETAIN_BYTES`] in
//! all, for the next product of a similar size.
use std::sync::Mutex;

/// Most bytes of idle buffers kept: a Qwen2.5-0.5B-sized head's two packed copies plus a
/// layer's operands.
pub const RETAIN_BYTES: usize = 640 << 20;

/// A buffer serves a request of at least this fraction of its capacity (a big buffer is not
/// spent on a small product and then missing for the next big one).
const MIN_FILL: usize = 2;

static IDLE: Mutex<Vec<Vec<u16>>> = Mutex::new(Vec::new());

fn idle() -> std::sync::MutexGuard<'static, Vec<Vec<u16>>> {
    // A panic while the lock was held left only a list of spare buffers: still usable.
    IDLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `len` zeros, in a kept buffer when one of a fitting size waits, else in a new one.
pub fn take(len: usize) -> Vec<u16> {
    let mut buf = kept(len);
    buf.clear();
    buf.resize(len, 0);
    buf
}

/// `len` elements for a caller that writes every one of them: a kept buffer's old values stay
/// (no pass clearing them), only elements past its previous length are zeroed.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub fn take_for_overwrite(len: usize) -> Vec<u16> {
    let mut buf = kept(len);
    buf.truncate(len);
    buf.resize(len, 0);
    buf
}

/// A kept buffer with room for `len` (its contents as left), or a new empty one.
fn kept(len: usize) -> Vec<u16> {
    let kept = {
        let mut idle = idle();
        let best = idle
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len && b.capacity() <= len.max(1) * MIN_FILL)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        best.map(|i| idle.swap_remove(i))
    };
    kept.unwrap_or_else(|| Vec::with_capacity(len))
}

/// Keeps `buf` for a later [`take`], dropping the smallest idle buffers while more than
/// [`RETAIN_BYTES`] wait.
pub fn give(buf: Vec<u16>) {
    if buf.capacity() * 2 > RETAIN_BYTES {
        return;
    }
    let mut idle = idle();
    idle.push(buf);
    let mut held: usize = idle.iter().map(|b| b.capacity() * 2).sum();
    while held > RETAIN_BYTES {
        let smallest = (0..idle.len())
            .min_by_key(|&i| idle[i].capacity())
            .expect("held > 0 means a buffer waits");
        held -= idle.swap_remove(smallest).capacity() * 2;
    }
}

/// Drops every idle buffer, handing its memory back to the allocator: after a phase whose
/// products were much larger than the next phase's (the LM head's, whose packed G of a chunk
/// would otherwise wait idle through the layers' backward).
pub fn release() {
    idle().clear();
}

/// Bytes of idle buffers kept now.
#[cfg(test)]
pub fn idle_bytes() -> usize {
    idle().iter().map(|b| b.capacity() * 2).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test touches the shared pool, so the counts below are not raced by another.
    #[test]
    fn buffers_come_back_zeroed_sized_and_bounded() {
        // Sizes no other test's product packs, so parallel tests do not take these buffers.
        let mut a = take(777_777);
        assert_eq!(a.len(), 777_777);
        a.iter_mut().for_each(|x| *x = 7);
        let ptr = a.as_ptr();
        give(a);
        // Reused (same allocation), zeroed, at the new length.
        let b = take(700_001);
        assert_eq!(b.as_ptr(), ptr);
        assert!(b.len() == 700_001 && b.iter().all(|&x| x == 0));
        // Too big for a 100,001-element request: a new buffer.
        give(b);
        let c = take(100_001);
        assert_ne!(c.as_ptr(), ptr);
        // Never more than RETAIN_BYTES idle; an oversized buffer is not kept at all.
        give(Vec::with_capacity(RETAIN_BYTES / 2 + 1));
        give(Vec::with_capacity(RETAIN_BYTES / 4));
        give(Vec::with_capacity(RETAIN_BYTES / 4));
        assert!(idle_bytes() <= RETAIN_BYTES);
        assert!(idle_bytes() >= RETAIN_BYTES / 2);
        drop(c);
    }
}
