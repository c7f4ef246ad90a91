/* kv.h - libkv, the core of kvtools: everything a program needs. */
#ifndef KV_H
#define KV_H
#include "core/err.h"
#include "core/tensor.h"
#include "core/half.h"
#include "core/npy.h"
#include "core/cli.h"
#define KV_VERSION "0.1.0"
#endif
