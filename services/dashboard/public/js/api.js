// A tiny fetch wrapper for the service's API (same origin). Successful responses resolve to the
// parsed JSON body; failures reject with an ApiError carrying the problem document's `detail`
// and field `errors` ([{path, message}]) so forms can show them next to their inputs.

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `The request failed (HTTP ${status}).`);
    this.name = 'ApiError';
    this.status = status;
    this.code = problem.code ?? 'error';
    this.detail = this.message;
    this.errors = Array.isArray(problem.errors) ? problem.errors : [];
  }
}

/**
 * @param {{ getKey: () => string, onUnauthorized: (error: ApiError) => void }} options
 *   onUnauthorized runs when the held key stops being accepted (401), e.g. to sign out.
 */
export function createApi({ getKey, onUnauthorized }) {
  async function request(method, path, { body, headers = {}, key } = {}) {
    const token = key ?? getKey();
    const init = {
      method,
      headers: { accept: 'application/json', ...headers },
      credentials: 'same-origin',
      cache: 'no-store',
      referrerPolicy: 'no-referrer',
    };
    if (token) init.headers.authorization = `Bearer ${token}`;
    if (body !== undefined) {
      init.headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch {
      throw new ApiError(0, { code: 'network_error', detail: 'The service could not be reached. Check the connection and try again.' });
    }
    const parsed = await readJson(response);
    if (response.ok) return parsed;
    const error = new ApiError(response.status, parsed && typeof parsed === 'object' ? parsed : {});
    if (response.status === 401 && key === undefined) onUnauthorized(error);
    throw error;
  }

  return {
    request,
    get: (path, options) => request('GET', path, options),
    post: (path, body, options) => request('POST', path, { ...options, body }),
    put: (path, body, options) => request('PUT', path, { ...options, body }),
    patch: (path, body, options) => request('PATCH', path, { ...options, body }),
    delete: (path, options) => request('DELETE', path, options),
  };
}

async function readJson(response) {
  const text = await response.text();
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return { detail: `Unexpected response from the service (HTTP ${response.status}).` };
  }
}

/** Path helper: every id is encoded, so no value can change the path's shape. */
export function path(strings, ...values) {
  return strings.reduce((out, part, i) => out + part + (i < values.length ? encodeURIComponent(values[i]) : ''), '');
}
