// Classifies errors from client-node calls: ApiException carries the HTTP status in `code`;
// a connection failure (API server unreachable) has none.

export function statusOf(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

export function isStatus(err: unknown, status: number): boolean {
  return statusOf(err) === status;
}

/** A short description of a failed call, without request bodies (which may hold secrets). */
export function describe(err: unknown): string {
  const status = statusOf(err);
  const body = (err as { body?: unknown })?.body;
  let message = err instanceof Error ? err.message.split('\n')[0] : String(err);
  if (typeof body === 'string') {
    try {
      message = JSON.parse(body).message ?? message;
    } catch {
      /* not JSON */
    }
  } else if (body && typeof body === 'object' && 'message' in body) {
    message = String((body as { message: unknown }).message);
  }
  return status ? `HTTP ${status}: ${message}` : message;
}
