//! Redis Cluster's key slots: which of the 16384 slots a key hashes to, and a short hash tag that
//! lands a key on a chosen shard.
//!
//! A key's slot is CRC16 (the XMODEM variant) of the key modulo 16384, except that when the key
//! holds a `{...}` with at least one byte between the first `{` and the next `}`, only those
//! bytes are hashed: the hash-tag rule that lets `holprobe:<run>:{hp7}:w0` and
//! `holprobe:<run>:{hp7}:p0` share a slot whatever the run id. The same computation as
//! redis-rs's cluster routing (which does not export it) and the server's own `CLUSTER KEYSLOT`.

/// The number of hash slots of a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// The slot a key belongs to (`CLUSTER KEYSLOT`).
pub fn key_slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).unwrap_or(key)) % SLOT_COUNT
}

/// The bytes of a key that are hashed when it has a non-empty `{...}` tag: those between the
/// first `{` and the first `}` after it.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&byte| byte == b'{')?;
    let after = &key[open + 1..];
    let close = after.iter().position(|&byte| byte == b'}')?;
    (close > 0).then(|| &after[..close])
}

/// How many tags [`hash_tag_for`] tries before giving up. Every slot is hit by some `hpN` with
/// N below 200 000 (checked by a unit test), so a search this long only fails for empty ranges.
const TAG_SEARCH_LIMIT: u32 = 1 << 20;

/// The shortest tag `hpN` (smallest N) whose slot lies in one of the inclusive `ranges`, to be
/// put in braces in a key (`holprobe:<run>:{hp7}:w0`) so that the key lands on the shard that
/// serves those slots. Deterministic: the same ranges give the same tag. `None` when the ranges
/// hold no slot (a shard that serves nothing).
pub fn hash_tag_for(ranges: &[(u16, u16)]) -> Option<String> {
    let holds = |slot: u16| ranges.iter().any(|&(lo, hi)| lo <= slot && slot <= hi);
    if !ranges.iter().any(|&(lo, hi)| lo <= hi && lo < SLOT_COUNT) {
        return None;
    }
    (0..TAG_SEARCH_LIMIT)
        .map(|n| format!("hp{n}"))
        .find(|tag| holds(key_slot(tag.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots `CLUSTER KEYSLOT` gave on Redis 7.0.15 for these keys, the hash-tag edge cases of
    /// the cluster specification among them.
    #[test]
    fn slots_match_the_server() {
        let asked = [
            ("foo", 12182),
            ("bar", 5061),
            ("{user1000}.following", 3443),
            ("foo{}{bar}", 8363),
            ("foo{{bar}}zap", 4015),
            ("foo{bar}{zap}", 5061),
            ("{}", 15257),
            ("", 0),
            ("123456789", 12739),
            ("holprobe:abc:{hp7}:w0", 15399),
            ("a{b", 13340),
        ];
        for (key, slot) in asked {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key:?}");
        }
    }

    #[test]
    fn tags_land_in_their_ranges_and_repeat() {
        for ranges in [
            vec![(0, 5460)],
            vec![(5461, 10922)],
            vec![(10923, 16383)],
            vec![(100, 100)],
            vec![(0, 10), (16000, 16383)],
        ] {
            let tag = hash_tag_for(&ranges).expect("a tag");
            let slot = key_slot(format!("holprobe:run:{{{tag}}}:w0").as_bytes());
            assert!(
                ranges.iter().any(|&(lo, hi)| lo <= slot && slot <= hi),
                "{tag} -> {slot} not in {ranges:?}"
            );
            assert_eq!(hash_tag_for(&ranges), Some(tag));
        }
        assert_eq!(hash_tag_for(&[]), None);
        assert_eq!(hash_tag_for(&[(16384, 20000)]), None);
    }

    /// Every slot has a tag well within the search limit, so no shard is ever without one.
    #[test]
    fn every_slot_has_a_short_tag() {
        let mut missing = vec![true; usize::from(SLOT_COUNT)];
        let mut left = missing.len();
        let mut n = 0u32;
        while left > 0 {
            assert!(n < 200_000, "{left} slots without a tag below hp{n}");
            let slot = usize::from(key_slot(format!("hp{n}").as_bytes()));
            if std::mem::replace(&mut missing[slot], false) {
                left -= 1;
            }
            n += 1;
        }
    }
}
