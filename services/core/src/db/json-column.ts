// A JSON column read as an object, whichever driver read it: PostgreSQL's parses json columns,
// PGlite's text-typed ones arrive as strings. Anything that is not an object reads as {}.
export function jsonObject(value: unknown): Record<string, unknown> {
  if (typeof value === 'string') {
    try {
      return jsonObject(JSON.parse(value));
    } catch {
      return {};
    }
  }
  return value && typeof value === 'object' ? (value as Record<string, unknown>) : {};
}
