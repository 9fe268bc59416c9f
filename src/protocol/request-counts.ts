// How many answers an OpenAI or SGLang request asks for: read by the connectors, the HTTP
// transport (one stream per element) and the fakes alike, so it sits below all three.

/** A request body as the client sent it. */
type RequestBody = Readonly<Record<string, unknown>>;

/**
 * How many answers a request asks for: its prompts (a list of strings or of token-id lists is
 * a batch) times its samples (see {@link samplesOf}).
 */
export function elementsOf(request: RequestBody): number {
  const batch = [request.prompt, request.text, request.input_ids].find(
    (value) => Array.isArray(value) && value.length > 0 && (typeof value[0] === 'string' || Array.isArray(value[0])),
  );
  return (batch === undefined ? 1 : (batch as unknown[]).length) * samplesOf(request).n;
}

/**
 * How many samples a request asks for per prompt, and the field that says so: `n` at the top
 * (OpenAI's routes), or SGLang's `sampling_params.n` on `/generate` (one object, or a list
 * with one per prompt, whose `n` SGLang requires to be the same).
 */
export function samplesOf(request: RequestBody): { n: number; param: string } {
  if (typeof request.n === 'number') return { n: Math.max(1, request.n), param: 'n' };
  const sampling = request.sampling_params;
  const first = Array.isArray(sampling) ? sampling[0] : sampling;
  const n = (first as { n?: unknown } | null | undefined)?.n;
  return { n: typeof n === 'number' ? Math.max(1, n) : 1, param: 'sampling_params.n' };
}
