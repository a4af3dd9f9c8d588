//! What a generator thread sends: the open-loop schedule, the closed loop's refills, the
//! encoding of one GET or SET, and the writes to the socket.

use std::cmp::Reverse;
use std::io::{self, Write};

use rand::{Rng, RngExt};

use super::Worker;
use crate::load::engine::recorder::Pending;
use crate::load::engine::{LATE_SEND_US, OpMix, SET_POOL};
use crate::load::keyspace::push_decimal;

impl Worker {
    /// Open loop: sends every request whose time has come on a connection with room.
    pub(super) fn send_due(&mut self, now: u64, stop_at: u64) {
        let start_us = self.rec.start_us;
        let pipeline = self.config.pipeline as usize;
        self.touched.clear();
        while let Some(&Reverse((due, i))) = self.heap.peek() {
            if due > now {
                break;
            }
            self.heap.pop();
            let client = &mut self.clients[i];
            client.in_heap = false;
            // The entry may be stale (the client sent its backlog since): go by its schedule.
            let due = client.intended_us(start_us, client.next_k);
            if due >= stop_at {
                continue;
            }
            if due > now {
                client.in_heap = true;
                self.heap.push(Reverse((due, i)));
                continue;
            }
            if client.stream.is_none() || client.inflight.len() >= pipeline {
                client.blocked = true;
                continue;
            }
            let lag = now - due;
            crate::load::stats::record(&mut self.schedule_lag, lag);
            if lag > LATE_SEND_US {
                self.late_sends += 1;
            }
            self.enqueue(i, due, now);
            let client = &mut self.clients[i];
            client.next_k += 1;
            let next = client.intended_us(start_us, client.next_k);
            if next < stop_at {
                client.in_heap = true;
                self.heap.push(Reverse((next, i)));
            }
            self.touched.push(i);
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.dedup();
        for &i in &touched {
            self.flush(i);
        }
        self.touched = touched;
    }

    /// Open loop: after a reply or a reconnect frees room, sends what was held back (late
    /// because of the server, so not counted as the generator's lag) and puts the connection
    /// back on the schedule.
    pub(super) fn unblock_open(&mut self, i: usize, now: u64) {
        let start_us = self.rec.start_us;
        let stop_at = self.stop_at();
        let pipeline = self.config.pipeline as usize;
        if !self.clients[i].blocked || self.draining || self.clients[i].stream.is_none() {
            return;
        }
        loop {
            let client = &self.clients[i];
            let due = client.intended_us(start_us, client.next_k);
            if due > now || due >= stop_at || client.inflight.len() >= pipeline {
                break;
            }
            self.enqueue(i, due, now);
            self.clients[i].next_k += 1;
        }
        let client = &mut self.clients[i];
        if client.inflight.len() < pipeline {
            client.blocked = false;
            let next = client.intended_us(start_us, client.next_k);
            if next < stop_at && !client.in_heap {
                client.in_heap = true;
                self.heap.push(Reverse((next, i)));
            }
        }
        self.flush(i);
    }

    /// Closed loop: tops the connection up to `pipeline` outstanding requests and writes them.
    pub(super) fn refill_closed(&mut self, i: usize, now: u64) {
        if self.draining || self.clients[i].stream.is_none() {
            return;
        }
        let pipeline = self.config.pipeline as usize;
        if self.clients[i].inflight.len() >= pipeline {
            return;
        }
        let stamp = self.clock.now_us().max(now);
        while self.clients[i].inflight.len() < pipeline {
            self.enqueue(i, stamp, stamp);
        }
        self.flush(i);
    }

    /// Encodes one request (GET, or SET by the ratio) into the connection's write buffer.
    pub(super) fn enqueue(&mut self, i: usize, start_us: u64, sent_us: u64) {
        let config = &self.config;
        let client = &mut self.clients[i];
        let server = &config.servers[client.server as usize];
        let index = match &server.key_indices {
            Some(indices) => {
                let pick =
                    ((u128::from(self.rng.next_u64()) * indices.len() as u128) >> 64) as usize;
                u64::from(indices[pick])
            }
            None => ((u128::from(self.rng.next_u64()) * u128::from(server.keys)) >> 64) as u64,
        };
        let is_set = match server.ops {
            OpMix::GetsOnly => false,
            OpMix::SetsOnly => true,
            OpMix::Ratio => {
                config.set_weight > 0
                    && self
                        .rng
                        .random_range(0..config.get_weight + config.set_weight)
                        >= config.get_weight
            }
        };
        let key_len = config.naming.key_len(index);
        let buf = &mut client.wbuf;
        let set_bytes = if is_set {
            let size = server.set_size;
            let len = if size.min_bytes >= size.max_bytes {
                size.min_bytes
            } else {
                self.rng.random_range(size.min_bytes..=size.max_bytes)
            }
            .min(crate::load::keyspace::MAX_LOAD_VALUE) as usize;
            let offset = self.rng.random_range(0..SET_POOL);
            buf.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$");
            push_decimal(key_len as u64, 0, buf);
            buf.extend_from_slice(b"\r\n");
            config.naming.push_key(index, buf);
            buf.extend_from_slice(b"\r\n$");
            push_decimal(len as u64, 0, buf);
            buf.extend_from_slice(b"\r\n");
            buf.extend_from_slice(&self.pool[offset..offset + len]);
            buf.extend_from_slice(b"\r\n");
            len as u32
        } else {
            buf.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$");
            push_decimal(key_len as u64, 0, buf);
            buf.extend_from_slice(b"\r\n");
            config.naming.push_key(index, buf);
            buf.extend_from_slice(b"\r\n");
            0
        };
        client.inflight.push_back(Pending {
            start_us,
            sent_us,
            set_bytes,
            key_index: index,
        });
    }

    /// Writes what the connection has buffered, as far as the socket takes it.
    pub(super) fn flush(&mut self, i: usize) {
        let client = &mut self.clients[i];
        let Some(stream) = client.stream.as_mut() else {
            return;
        };
        while client.wpos < client.wbuf.len() {
            match stream.write(&client.wbuf[client.wpos..]) {
                Ok(0) => {
                    self.fail(i, "the server closed the connection".into());
                    return;
                }
                Ok(n) => client.wpos += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    self.fail(i, format!("write failed: {err}"));
                    return;
                }
            }
        }
        client.wbuf.clear();
        client.wpos = 0;
    }
}
