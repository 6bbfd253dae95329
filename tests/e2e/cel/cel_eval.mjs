// Evaluates CEL expressions for tests/e2e/node_policy_test.py with @marcbachmann/cel-js (a CEL
// implementation independent of Prism; Kubernetes itself uses cel-go).
//
// Line protocol, one JSON document per line each way, so one process serves a whole test run:
// stdin:  {"jobs": [{"expression": "...", "bindings": {"request": {...}, ...}}, ...]}
// stdout: {"results": [{"value": <JSON>} | {"error": "<message>"}, ...]}, one per job, in order.
// Integers come back as JSON numbers (cel-js yields BigInt); anything JSON cannot hold is an error.
import {createInterface} from 'node:readline'

import {parse} from '@marcbachmann/cel-js'

function toJson(value) {
  if (typeof value === 'bigint') return Number(value)
  if (value === null || typeof value === 'boolean' || typeof value === 'string' ||
      typeof value === 'number') {
    return value
  }
  if (Array.isArray(value)) return value.map(toJson)
  if (value instanceof Map) return Object.fromEntries([...value].map(([k, v]) => [k, toJson(v)]))
  if (typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toJson(v)]))
  }
  throw new Error(`a CEL value of type ${typeof value} has no JSON form`)
}

const compiled = new Map()
function run({expression, bindings}) {
  try {
    if (!compiled.has(expression)) compiled.set(expression, parse(expression))
    return {value: toJson(compiled.get(expression)(bindings))}
  } catch (e) {
    return {error: String(e.message).split('\n')[0]}
  }
}

for await (const line of createInterface({input: process.stdin, crlfDelay: Infinity})) {
  if (line.trim() === '') continue
  const {jobs} = JSON.parse(line)
  process.stdout.write(JSON.stringify({results: jobs.map(run)}) + '\n')
}
