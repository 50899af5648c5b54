// Repeats a refresh while the page is visible, one call at a time (never overlapping), until
// stop(). The interval may be a function, re-read before every wait (e.g. faster while a QR code
// is shown); reschedule() restarts the wait after the caller refreshed on its own.
export function startPolling(refresh, intervalMs) {
  let stopped = false;
  let running = false;
  let timer;
  const interval = typeof intervalMs === 'function' ? intervalMs : () => intervalMs;

  const schedule = () => {
    clearTimeout(timer);
    if (!stopped) timer = setTimeout(tick, interval());
  };
  const tick = async () => {
    if (stopped || running) return;
    running = true;
    try {
      if (!document.hidden) await refresh();
    } catch {
      /* the view shows its own errors; keep polling */
    } finally {
      running = false;
    }
    schedule();
  };
  schedule();

  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
    reschedule: schedule,
  };
}
