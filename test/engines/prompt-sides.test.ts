// What an engine computes of a prompt on prefill only is its connector's to declare: the flow's
// prompt side reads the declaration and names no engine.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { endpointNamed } from '../../src/endpoints/registry.js';
import { promptSideOf, refusePromptSide } from '../../src/engines/prompt-sides.js';
import { sglangBootstrap, trtllmContextFirst, vllmNixl } from '../../src/engines/registry.js';
import { promptSideWith } from '../../src/flow/prompt-side.js';

const completions = endpointNamed('completions');
const chat = endpointNamed('chat');
const generate = endpointNamed('generate');
const withPromptLogprobs = { model: 'm', prompt: 'Hi', prompt_logprobs: 1 };
const chatEcho = { model: 'm', messages: [{ role: 'user', content: 'Hi' }], echo: true };
const inputLogprobs = { model: 'm', text: 'Hi', return_logprob: true };

describe("the prompt side, each engine's connector declaring its own", () => {
  it('the flow names no engine: its prompt side branches on what a connector declares', () => {
    const source = readFileSync(new URL('../../src/flow/prompt-side.ts', import.meta.url), 'utf8');
    expect(source).not.toMatch(/'(vllm|sglang|trtllm)'/);
  });

  it("vLLM's connector: prompt logprobs and chat's echo; SGLang's: /generate's input logprobs; TensorRT-LLM's: none", () => {
    expect(vllmNixl.promptSide?.(withPromptLogprobs, completions)?.strip).toEqual(['prompt_logprobs']);
    expect(vllmNixl.promptSide?.(chatEcho, chat)?.strip).toEqual(['echo']);
    expect(vllmNixl.promptSide?.(inputLogprobs, generate)).toBeUndefined();
    expect(sglangBootstrap.promptSide?.(withPromptLogprobs, completions)).toBeUndefined();
    expect(sglangBootstrap.promptSide?.(chatEcho, chat)).toBeUndefined();
    expect(sglangBootstrap.promptSide?.(inputLogprobs, generate)?.strip).toEqual([]);
    expect(trtllmContextFirst.promptSide).toBeUndefined();
  });

  it("a connector of one's own declares its parts; OpenAI's echo of a completion with logprobs is every engine's", () => {
    expect(promptSideWith({ chatEcho: true }, chatEcho, chat)?.strip).toEqual(['echo']);
    expect(promptSideWith({}, chatEcho, chat)).toBeUndefined();
    const echoed = { model: 'm', prompt: 'Hi', echo: true, logprobs: 1 };
    expect(promptSideWith({}, echoed, completions)?.strip).toEqual(['echo']);
  });

  it('refused before any worker where the engine would: vLLM streamed prompt logprobs; an echo of token ids everywhere', () => {
    const streamed = { ...withPromptLogprobs, stream: true };
    expect(vllmNixl.refuse?.(streamed, completions)?.param).toBe('prompt_logprobs');
    expect(sglangBootstrap.refuse?.(streamed, completions)).toBeUndefined();
    const ids = { model: 'm', prompt: [1, 2], echo: true, logprobs: 1 };
    expect(vllmNixl.refuse?.(ids, completions)?.param).toBe('echo');
    expect(sglangBootstrap.refuse?.(ids, completions)?.param).toBe('echo');
  });

  it('the names of before answer as the connectors do, the endpoint by the body when not given', () => {
    expect(promptSideOf('vllm', withPromptLogprobs)?.strip).toEqual(['prompt_logprobs']);
    expect(promptSideOf('sglang', inputLogprobs)?.strip).toEqual([]);
    expect(promptSideOf('sglang', withPromptLogprobs, completions)).toBeUndefined();
    expect(refusePromptSide('vllm', { ...withPromptLogprobs, stream: true })?.param).toBe('prompt_logprobs');
    expect(refusePromptSide('sglang', { ...withPromptLogprobs, stream: true })).toBeUndefined();
  });
});
