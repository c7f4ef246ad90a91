/* kv.h - libkv, the core of kvtools: everything a program needs. */
#ifndef KV_H
#define KV_H
#include "err.h"
#include "tensor.h"
#include "half.h"
#include "npy.h"
#include "cli.h"
#define KV_VERSION "0.1.0"
#endif
