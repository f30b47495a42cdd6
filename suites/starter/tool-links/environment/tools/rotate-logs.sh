#!/bin/bash
echo rotating
