"""Send/Recv between the processes of a cluster: routing, ZeroMQ sockets, the object store, compression.

Every process of a cluster (the chief and each task's actor) has one `Wire`: a
ZeroMQ PULL socket it binds, whose address it publishes through the Ray actor
calls that connect the tasks, and one PUSH socket per peer it sends to. A Send
whose Recv is on a device of the same process completes through the in-process
table, as in a one-process run; a Send to another process is queued for the
Wire's sending thread, which pickles what has queued up for each peer (protocol
5, large arrays as out-of-band frames) into one multipart message and pushes
it: no actor call, no poll, and a loop that sends every iteration pays one
pickle per batch. Messages from one process to another arrive in the order
they were sent, and a Send never blocks (no high-water mark). The sockets
use CURVE with a key pair the chief makes per cluster and hands to the tasks
through Ray, so only the cluster's own processes can connect and unpickle.

Values of `object_store_bytes` or more do not travel on the socket: a task
keeps the value and sends a `Held` note; the receiver takes the value with a
Ray actor call (`Task.take`), so it crosses through Ray's object store. The
chief, which is not an actor, puts such a value in the object store and hands
its reference to the task in a `Task.deliver` call.

Under Ray Client (`ray://`), the chief may not be reachable from the tasks'
network, nor they from it: its messages then go as before, in `Task.deliver`
calls, and the tasks' messages to it wait in the task's chief box until the
chief's status poll takes them (tasks still talk to each other on sockets).

Keys are (step id, tensor name, send device, recv device, frame tag): two steps
in flight never meet. Dead signals cross as the DEAD singleton (it pickles as a
reference). Opt-in lossy compression (whitepaper §5.5) sends float32 values as
their 16 high bits (bfloat16: the mantissa truncated) and widens them on arrival.
"""
import collections
import pickle
import threading

import numpy as np

from dfc.errors import DfcError, DfcRuntimeError
from dfc.runtime.devices import Sent, is_device_array, split_task
from dfc.runtime.values import DEAD
from dfc.runtime.rendezvous import Rendezvous

COMPRESSIONS = (None, "bfloat16")


def task_of(device):
    """The task a device belongs to ('worker:1' for 'worker:1/cpu:0'); None for the chief's devices."""
    return split_task(device)[0]


class Encoded:
    """A float32 array sent as bfloat16 bits (the upper half of each float32)."""
    __slots__ = ("bits",)

    def __init__(self, bits):
        self.bits = bits

    def decode(self):
        return (self.bits.astype(np.uint32) << 16).view(np.float32)


class Stored:
    """A value the chief put in Ray's object store: only its reference crosses, in a Task.deliver call."""
    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref


class Held:
    """A value its sending task holds until the receiver takes it with a Task.take call: the value crosses
    through Ray's object store (a large actor result), and Ray counts the reference."""
    __slots__ = ("task", "n")

    def __init__(self, task, n):
        self.task, self.n = task, n


def encode(v, compression):
    """What a Send to another process ships for value v (and how many bytes that is)."""
    if compression == "bfloat16" and isinstance(v, np.ndarray) and v.dtype == np.float32:
        bits = (np.ascontiguousarray(v).view(np.uint32) >> 16).astype(np.uint16)
        return Encoded(bits), bits.nbytes
    return v, getattr(v, "nbytes", 8)


def decode(v, timeout=None, take=None):
    """The value a message carries; a value in the object store is fetched, waiting at most `timeout` s
    (its owner may have stopped answering: the wait must end). take(task, n, timeout): a Held value."""
    if isinstance(v, (Stored, Held)):
        import ray
        try:
            v = ray.get(v.ref, timeout=timeout) if isinstance(v, Stored) else take(v.task, v.n, timeout)
        except Exception as e:   # noqa: BLE001 — Ray's timeout and owner-died errors
            raise DfcRuntimeError(f"a value in Ray's object store could not be fetched within {timeout:g} s "
                                  f"({type(e).__name__})" if timeout else
                                  f"a value in Ray's object store could not be fetched ({type(e).__name__})"
                                  ) from None
    if isinstance(v, Encoded):
        return v.decode()
    if isinstance(v, np.ndarray) and not v.flags.writeable:
        return v.copy()     # read-only views of a message or of the object store; kernels may own their inputs
    return v


class Counters:
    """Messages this process handed to others and received from them (for quiescence), and bytes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = self.received = self.bytes_sent = self.stored = 0

    def add_sent(self, nbytes, stored):
        with self.lock:
            self.sent += 1
            self.bytes_sent += nbytes
            self.stored += stored

    def add_received(self, n=1):
        with self.lock:
            self.received += n

    def snapshot(self):
        with self.lock:
            return {"sent": self.sent, "received": self.received, "bytes_sent": self.bytes_sent,
                    "stored": self.stored}


def leaving(value):
    """A value about to leave its process, in host memory: a GPU partition's Send carries the device array
    and an event recorded after the work producing it, and neither pickles; wait for the event, then copy
    the array to the host (the receiving process copies it onto its own device)."""
    if isinstance(value, Sent):
        if value.event is not None:
            value.event.synchronize()
        value = value.value
    value = value.get() if is_device_array(value) else value
    if not (value is DEAD or isinstance(value, (np.ndarray, np.generic))):
        # it may not pickle, nor mean anything in another process: fail the Send here, naming it
        raise DfcRuntimeError(f"a {type(value).__name__} cannot be sent to another process (only arrays "
                              f"cross between tasks; keep resources such as TensorArrays on one task)")
    return value


class StepRendezvous:
    """The rendezvous of one step in one process of a cluster (see the module docstring).

    me: this process's task (None: the chief); ship(dest, step, key, value): hands a message to another
    process (dest None: the chief); take(task, step, n, timeout): a value task holds for this process."""

    def __init__(self, step, me, ship, counters, compression=None, store_bytes=None, fetch_timeout=None,
                 take=None):
        self.step, self.me, self.ship, self.counters = step, me, ship, counters
        self.compression, self.store_bytes, self.take = compression, store_bytes, take
        self.fetch_timeout = fetch_timeout      # seconds a value in the object store may take to fetch
        self.local = Rendezvous()
        self.held, self.lock, self.count = {}, threading.Lock(), 0     # n -> a large value another takes

    def send(self, key, value):
        dest = task_of(key[2])
        if dest == self.me:
            self.local.send(key, value)
            return
        v, nbytes = encode(leaving(value), self.compression)
        stored = False
        if self.store_bytes is not None and nbytes >= self.store_bytes and isinstance(v, (np.ndarray, Encoded)):
            stored = True
            if self.me is None:         # the chief is not an actor: nobody can take from it
                import ray
                v = Stored(ray.put(v))
            else:
                with self.lock:
                    self.count += 1
                    n, self.held[self.count] = self.count, v
                v = Held(self.me, n)
        self.counters.add_sent(nbytes, stored)
        self.ship(dest, self.step, key, v)

    def give(self, n):
        """The held value n, for the process that takes it (once)."""
        with self.lock:
            v = self.held.pop(n, None)
        if v is None:
            raise DfcRuntimeError(f"task {self.me} holds no value {n} of step {self.step}")
        return v

    def recv(self, key, callback):
        self.local.recv(key, callback)

    def arrive(self, key, value):
        """A value sent by another process for this step.

        Counted as received only once it is handed to its Recv (whose partition is then busy): counted
        before, the quiescence check could see this process idle and every count balanced while a large
        value is still being decoded or copied, and report a deadlock that is not one."""
        self.local.send(key, decode(value, self.fetch_timeout, self._take))
        self.counters.add_received()

    def _take(self, task, n, timeout):
        return self.take(task, self.step, n, timeout)


class ChiefBox:
    """A task's messages to the chief, per step, until the chief's poller takes them."""

    def __init__(self):
        self.cv = threading.Condition()
        self.items = collections.defaultdict(list)

    def put(self, step, key, value):
        with self.cv:
            self.items[step].append((key, value))
            self.cv.notify_all()

    def take(self, step, timeout):
        with self.cv:
            if not self.items.get(step):
                self.cv.wait(timeout)
            return self.items.pop(step, [])

    def drop(self, step):
        with self.cv:
            self.items.pop(step, None)


# ---------------------------------------------------------------------------------------------- sockets
RECEIVE_POLL_MS = 200       # how often the receiving thread looks whether its Wire was closed
SMALL_FRAME = 4096          # arrays smaller than this are pickled in the message's first frame


def _zmq():
    try:
        import zmq
    except ImportError:
        raise DfcError("clusters need pyzmq for Send/Recv between processes: pip install 'dfc[cluster]' "
                       "(or pip install pyzmq)") from None
    return zmq


def keypair():
    """A cluster's CURVE key pair (public, secret), made by the chief and handed to its tasks through Ray."""
    zmq = _zmq()
    if not zmq.has("curve"):
        raise DfcError(f"this pyzmq's libzmq ({zmq.zmq_version()}) was built without CURVE security, which the "
                       f"cluster's sockets need: install pyzmq's own wheel (pip install --force-reinstall pyzmq)")
    return zmq.curve_keypair()


class _Peer:
    __slots__ = ("address", "sock", "lock")

    def __init__(self, address, sock):
        self.address, self.sock, self.lock = address, sock, threading.Lock()


class Wire:
    """One process's ZeroMQ endpoint: a bound PULL socket read by one thread, a PUSH socket per peer.

    on_message(step, key, value) is called on the receiving thread for each message (on a thread of its
    own for a value to fetch from the object store, which may take long). Sends come from any thread;
    on_error(step, error) is called for a message that could not be pickled (its step must fail: left
    unsent, the message would keep the step from ever looking quiescent)."""

    def __init__(self, name, keys, on_message, on_error=None, host=None):
        zmq = _zmq()
        from zmq.auth.thread import ThreadAuthenticator
        self.name, self.on_message, self.on_error = name, on_message, on_error
        self.public, secret = keys
        self.ctx = zmq.Context()
        # only a peer proving it holds the cluster's secret key gets through the handshake
        self.auth = ThreadAuthenticator(self.ctx)
        self.auth.start()
        self.auth.configure_curve_callback("*", _OnlyKey(self.public))
        self._secret = secret
        self.sock = self._socket(zmq.PULL, server=True)
        host = host or _host()
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        self.peers = {}             # name -> _Peer
        self.lock = threading.Lock()
        self.closed = False
        self.cv, self.pending = threading.Condition(), []       # [(peer, message)] for the sending thread
        self.thread = threading.Thread(target=self._receive, name=f"dfc-wire-{name}", daemon=True)
        self.thread.start()
        self.sender = threading.Thread(target=self._send, name=f"dfc-send-{name}", daemon=True)
        self.sender.start()

    def _socket(self, kind, server):
        import zmq
        s = self.ctx.socket(kind)
        s.linger = 0
        s.sndhwm = s.rcvhwm = 0         # never block a Send: the step's own limits bound what is in flight
        s.curve_publickey, s.curve_secretkey = self.public, self._secret
        if server:
            s.curve_server = True
        else:
            s.curve_serverkey = self.public
        return s

    def connect(self, addresses):
        """addresses: peer name -> address (None: not on the wire). A changed address (a restarted task)
        gets a new socket; messages still queued for the old process are dropped with it."""
        import zmq
        with self.lock:
            for name, address in addresses.items():
                old = self.peers.get(name)
                if old is not None and old.address == address:
                    continue
                if address is not None:
                    s = self._socket(zmq.PUSH, server=False)
                    s.connect(address)
                    self.peers[name] = _Peer(address, s)
                else:
                    self.peers.pop(name, None)
                if old is not None:
                    with old.lock:
                        old.sock.close()
                        old.sock = None

    def reaches(self, name):
        return name in self.peers

    def send(self, dest, step, key, value):
        """Queue a message for peer `dest`; the sending thread ships what has queued up."""
        if dest not in self.peers:
            raise DfcRuntimeError(f"{_who(self.name)} has no address for {_who(dest)} (was it restarted "
                                  f"during the step?)")
        with self.cv:
            self.pending.append((dest, (step, key, value)))
            self.cv.notify()

    def _send(self):
        """Ship the queued messages, each peer's in one multipart message: a Send costs its partition's thread
        only a list append, and a fast producer's messages are pickled and sent together."""
        while True:
            with self.cv:
                while not self.pending and not self.closed:
                    self.cv.wait()
                if not self.pending:
                    return
                batch, self.pending = self.pending, []
            by_peer = {}
            for dest, item in batch:
                by_peer.setdefault(dest, []).append(item)
            for dest, items in by_peer.items():
                frames = self._pack(items)
                peer = self.peers.get(dest)
                if peer is None or frames is None:
                    continue
                with peer.lock:
                    if peer.sock is not None:       # else closed by connect() (its process was replaced)
                        peer.sock.send_multipart(frames)

    def _pack(self, items):
        """The frames of one message carrying items, or None. An item that does not pickle is left out and
        its step told (on_error)."""
        try:
            buffers = []
            head = pickle.dumps(items, protocol=5, buffer_callback=lambda b: _out_of_band(b, buffers))
            return [head, *(b.raw() for b in buffers)]
        except Exception as e:   # noqa: BLE001 — find the items that do not pickle
            good = []
            for item in items:
                try:
                    pickle.dumps(item[2], protocol=5)
                    good.append(item)
                except Exception as bad:   # noqa: BLE001 — reported to its step
                    self._unsent(item, bad)
            if len(good) == len(items):     # none is to blame alone: fail their steps rather than lose them
                for item in items:
                    self._unsent(item, e)
                return None
            return self._pack(good) if good else None

    def _unsent(self, item, error):
        step, key, value = item
        if self.on_error is not None:
            self.on_error(step, DfcRuntimeError(f"the value of {key[0]} ({type(value).__name__}) could not be "
                                                f"sent to another process: {type(error).__name__}: {error}"))

    def _receive(self):
        import zmq
        sock = self.sock
        sock.rcvtimeo = RECEIVE_POLL_MS
        while not self.closed:
            try:
                frames = sock.recv_multipart(copy=False)
            except zmq.Again:
                continue
            except zmq.ZMQError:
                return          # closed
            try:
                items = pickle.loads(frames[0].buffer, buffers=[f.buffer for f in frames[1:]])
            except Exception:   # noqa: BLE001 — not a message of ours (the handshake admits only the cluster)
                continue
            for step, key, value in items:
                if isinstance(value, (Stored, Held)):
                    threading.Thread(target=self.on_message, args=(step, key, value), daemon=True,
                                     name=f"dfc-fetch-{self.name}").start()
                else:
                    try:
                        self.on_message(step, key, value)
                    except Exception as e:   # noqa: BLE001 — the step fails; this thread must go on
                        if self.on_error is not None:
                            self.on_error(step, DfcRuntimeError(f"a value for {key[0]} could not be received: "
                                                                f"{type(e).__name__}: {e}"))

    def close(self):
        with self.cv:
            self.closed = True
            self.cv.notify()
        self.sender.join(1)
        self.thread.join(2 * RECEIVE_POLL_MS / 1000 + 1)
        with self.lock:
            for peer in self.peers.values():
                with peer.lock:
                    if peer.sock is not None:
                        peer.sock.close()
                        peer.sock = None
            self.peers.clear()
        self.sock.close()
        self.auth.stop()
        self.ctx.term()


class _OnlyKey:
    """The CURVE handshake's check: a peer must hold the cluster's key pair."""

    def __init__(self, public):
        self.public = public        # Z85 text, as zmq.curve_keypair makes it and the check is given it

    def callback(self, domain, key):
        return key == self.public


def _out_of_band(buffer, buffers):
    if buffer.raw().nbytes < SMALL_FRAME:
        return True             # in the first frame
    buffers.append(buffer)
    return None


def _host():
    """This process's address on the Ray cluster's network."""
    import ray
    return ray.util.get_node_ip_address()


def _who(name):
    return "the chief" if name is None or name == "chief" else f"task {name}"
