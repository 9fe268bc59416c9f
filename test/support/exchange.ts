import type { Exchange, RequestHeaders } from '../../src/server/pipeline/exchange.js';

/** An exchange of a request whose body is `body`: its answer's headers kept in `answerHeaders`, never gone unless `leave` is called. */
export function bodyExchange(
  body: string,
  headers: RequestHeaders = {},
): Exchange & { readonly answerHeaders: Record<string, string>; leave(): void } {
  let leave = () => {};
  const gone = new Promise<void>((resolve) => {
    leave = resolve;
  });
  const answerHeaders: Record<string, string> = {};
  return {
    headers,
    bodyText: async () => body,
    gone,
    setHeader: (name, value) => {
      answerHeaders[name] = value;
    },
    answerHeaders,
    leave: () => leave(),
  };
}
