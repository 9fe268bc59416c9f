// The endpoints' public face: what a router author needs to name, check and route an API.
export { type AnswerShape, budgetOf, type Endpoint, type EndpointBody, type Misfit, type Serving } from './endpoint.js';
export {
  ENDPOINTS,
  type EndpointName,
  endpointNamed,
  endpointOf,
  type GenerationName,
  isEndpointName,
  type RegisteredEndpoint,
} from './registry.js';
