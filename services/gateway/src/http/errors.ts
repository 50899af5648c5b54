// Turns anything thrown into an RFC 9457 problem document. Unknown errors become a 500 with
// a generic detail: the stack trace goes to the log, never to the client.
import type { Context, Next } from 'koa';
import { STATUS_CODES } from 'node:http';
import { trace } from '@opentelemetry/api';
import { isDatabaseUnavailable, markFailed, Problem, problems, scrubCredentials, scrubPath, type Logger } from '@switchboard/core';

export function problemResponder(log: Logger) {
  return async function respondWithProblems(ctx: Context, next: Next): Promise<void> {
    try {
      await next();
      // Koa and the router answer some errors with an empty body (no route, a method the path
      // lacks): those become problem documents too.
      if (ctx.status >= 400 && ctx.body == null) throw emptyAnswerProblem(ctx);
    } catch (err) {
      const problem = toProblem(err);
      logServerSide(log, ctx, err, problem);
      // A 5xx fails the request's span (OpenTelemetry's HTTP server convention), which only sees
      // the status this answer sets.
      const span = trace.getActiveSpan();
      if (span && problem.status >= 500) markFailed(span, err instanceof Problem ? problem.code : scrubbedError(err));
      ctx.status = problem.status;
      ctx.type = 'application/problem+json';
      // A detail never repeats an id or a path (a credential put there by mistake would come back);
      // a field name it may name is also cleared of credentials of our shapes. Never of one by its
      // value: "[redacted]" where a guess stood would confirm the guess.
      ctx.body = scrubCredentials(JSON.stringify(problem.toJSON()));
      for (const [k, v] of Object.entries(problem.headers)) ctx.set(k, v);
    }
  };
}

/** A 4xx is the client's fault and its answer says it all. A fault we did not expect is logged
 *  with its stack; a 5xx we answer on purpose says what happened in its code, and a dependency
 *  not ready or too slow (503, 504) is a warning. */
function logServerSide(log: Logger, ctx: Context, err: unknown, problem: Problem): void {
  if (problem.status < 500) return;
  // Decoded where a client percent-encoded a credential in it, so the log's scrubbing finds it.
  const path = scrubPath(ctx.path);
  const fields = { path, method: ctx.method, status: problem.status, problem: problem.code, detail: problem.detail };
  if (problem.status === 503 || problem.status === 504) {
    // A dependency not ready (a database restart) is named by its message; its stack says nothing.
    const cause = err instanceof Problem ? undefined : String((err as Error)?.message ?? err);
    return log.warn({ ...fields, cause }, 'request could not be served now');
  }
  if (!(err instanceof Problem)) return log.error({ err, path, method: ctx.method }, 'request failed');
  log.error(fields, 'request failed');
}

/** The error as a span may record it: spans are not scrubbed on the way out as log lines are. */
function scrubbedError(err: unknown): Error {
  const safe = new Error(scrubCredentials(err instanceof Error ? err.message : String(err)));
  if (err instanceof Error) safe.name = err.name;
  return safe;
}

function emptyAnswerProblem(ctx: Context): Problem {
  if (ctx.status === 404) return new Problem(404, 'not_found', `No route answers ${ctx.method} on this path.`);
  // The router answers 501 for a method no route has (TRACE, PROPFIND): that is the client's
  // request, not a fault of the server, so it is a 405 like any other method the path lacks (the
  // router's Allow header stays).
  if (ctx.status === 405 || ctx.status === 501) return new Problem(405, 'method_not_allowed', `${ctx.method} is not allowed on this path.`);
  const reason = STATUS_CODES[ctx.status] ?? 'Error';
  return new Problem(ctx.status, reason.toLowerCase().replace(/\W+/g, '_'), `${reason}.`);
}

export function toProblem(err: unknown): Problem {
  if (err instanceof Problem) return err;
  const e = err as { status?: number; statusCode?: number; expose?: boolean; type?: string; message?: string };
  const status = e?.status ?? e?.statusCode;
  // Errors raised by Koa/raw-body/router for client faults (4xx) are safe to describe.
  if (typeof status === 'number' && status >= 400 && status < 500) {
    if (status === 413) return new Problem(413, 'body_too_large', 'The request body is too large.');
    return new Problem(status, 'bad_request', e.expose && e.message ? e.message : 'The request could not be processed.');
  }
  if (isDatabaseUnavailable(err)) {
    return problems.databaseUnavailable();
  }
  return new Problem(500, 'internal_error', 'An unexpected error occurred; it has been logged. Retry later.');
}
