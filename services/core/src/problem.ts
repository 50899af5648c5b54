// RFC 9457 problem details (DESIGN §5). Throw a Problem anywhere in a request; the gateway's
// error middleware turns it into an application/problem+json response.
import { STATUS_CODES } from 'node:http';

export interface FieldProblem {
  path: string;
  message: string;
}

/** RFC 9110's names where Node still has older ones (413, 422); Node's table for the rest. */
const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  409: 'Conflict',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  501: 'Not Implemented',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

export class Problem extends Error {
  constructor(
    public readonly status: number,
    public readonly code: string,
    public readonly detail: string,
    public readonly errors?: FieldProblem[],
    public readonly headers: Record<string, string> = {},
  ) {
    super(detail);
    this.name = 'Problem';
  }

  get title(): string {
    return TITLES[this.status] ?? STATUS_CODES[this.status] ?? 'Error';
  }

  toJSON(): Record<string, unknown> {
    return {
      type: `https://switchboard.dev/problems/${this.code.replace(/_/g, '-')}`,
      title: this.title,
      status: this.status,
      detail: this.detail,
      code: this.code,
      ...(this.errors?.length ? { errors: this.errors } : {}),
    };
  }
}

export const problems = {
  validation: (errors: FieldProblem[], detail = 'The request is not valid; see errors for each field.') =>
    new Problem(400, 'validation_failed', detail, errors),
  badRequest: (code: string, detail: string) => new Problem(400, code, detail),
  unauthorized: (detail = 'Send a valid credential as "Authorization: Bearer <token>".') =>
    new Problem(401, 'unauthorized', detail, undefined, { 'WWW-Authenticate': 'Bearer' }),
  forbidden: (detail = 'This credential does not give access to this resource.') => new Problem(403, 'forbidden', detail),
  notFound: (what: string) => new Problem(404, 'not_found', `${what} does not exist.`),
  conflict: (code: string, detail: string) => new Problem(409, code, detail),
  unavailable: (code: string, detail: string) => new Problem(503, code, detail),
  /** The database is away (a restart, a failover): the request is safe to send again. */
  databaseUnavailable: () =>
    new Problem(503, 'database_unavailable', 'The database cannot be reached right now; retry shortly (with the same Idempotency-Key for a send).', undefined, { 'Retry-After': '1' }),
  /** A pairing-code request to a session that reconnects with a linked phone: it does not pair. */
  linkedAlready: () =>
    problems.conflict('not_pairing', 'The instance keeps the credentials of its linked phone and reconnects with them; to pair another phone, disconnect or reset it, then request a code.'),
};
