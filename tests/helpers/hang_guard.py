"""A guard against hangs (an infinite loop on hostile input), not a speed test: the block must end
within a generous bound, else it is interrupted with a TimeoutError naming the bound."""
import contextlib
import signal


@contextlib.contextmanager
def hang_guard(seconds=60):
    """Interrupt the block (main thread, POSIX) if it runs past ``seconds``."""
    def interrupt(signum, frame):
        raise TimeoutError(f"did not finish within {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
